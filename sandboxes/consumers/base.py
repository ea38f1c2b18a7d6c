"""What the dashboard's websockets share: staff only, rendering in the admin's language with
the admin's CSRF token, and one render of a change for every page of a process that needs the
same one."""

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.http import HttpRequest
from django.middleware.csrf import get_token
from django.template.loader import render_to_string
from django.utils import translation

from boxyard.web import is_admin
from sandboxes import live
from sandboxes.selectors import Principal, principal_for_user

REFUSED = 4403
# Where a render shared by several pages has a CSRF token: each page puts its own in.
CSRF_MARK = "csrf-token-of-the-page"


class DashboardConsumer(AsyncWebsocketConsumer):
    """Staff only; renders in the admin's language."""

    admitted = False

    async def connect(self) -> None:
        user = self.scope.get("user")
        if not is_admin(user):
            await self.close(code=REFUSED)
            return
        self.admitted = True
        live.serve_from(asyncio.get_running_loop())
        self.admin_name = user.get_username()  # type: ignore[union-attr]  # is_admin: a user
        admin = principal_for_user(user)  # type: ignore[arg-type]  # is_admin: a user
        assert admin is not None  # is_admin let only an admin in
        self.admin: Principal = admin  # whose sandboxes the page may fetch (the selector's)
        self.language = language_of(self.scope)
        self.csrf_token = csrf_token_of(self.scope)
        for group in self.joined_groups():
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_html(await database_sync_to_async(self.first_render)())

    async def disconnect(self, code: int) -> None:
        if not self.admitted:
            return
        for group in self.joined_groups():
            await self.channel_layer.group_discard(group, self.channel_name)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """As Channels dispatches a message, less its turn on the database's one thread (to
        close old connections) before every message: these handlers reach the database only
        through `database_sync_to_async`, which closes them itself. With 100 fleet pages open,
        that turn was 100 waits in one queue for every change."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def send_html(self, html: str) -> None:
        if html:
            await self.send(text_data=html)

    def render(self, template: str, context: dict[str, Any], csrf_token: str | None = None) -> str:
        """A partial as the page renders it: in the admin's language, its forms carrying the
        admin's CSRF token (or `csrf_token`: CSRF_MARK, in a render shared by several pages,
        each of which puts its own in)."""
        token = self.csrf_token if csrf_token is None else csrf_token
        with translation.override(self.language):
            return render_to_string(template, {**context, "oob": True, "csrf_token": token})

    def joined_groups(self) -> list[str]:
        raise NotImplementedError

    def first_render(self) -> str:
        raise NotImplementedError


_rendered: OrderedDict[tuple[Any, ...], asyncio.Future[Any]] = OrderedDict()
_RENDERED_KEPT = 256


async def shared(key: tuple[Any, ...], render: Callable[..., Any], *args: Any) -> Any:
    """`render(*args)` once for all the pages that ask with the same key, a message (by its
    id) and what else makes the result differ: the first page to ask starts it (a task of its
    own, in a thread, so a page that leaves meanwhile cancels nothing); the others wait for it."""
    message, *rest = key
    key = (message.get("id") or object(), *rest)  # a message without an id is not shared
    task = _rendered.get(key)
    if task is None:
        task = asyncio.ensure_future(database_sync_to_async(render)(*args))
        _rendered[key] = task
        while len(_rendered) > _RENDERED_KEPT:
            _rendered.popitem(last=False)
    return await asyncio.shield(task)


def csrf_token_of(scope: Mapping[str, Any]) -> str:
    """A CSRF token for the forms in pushed partials, from the admin's CSRF cookie (masked, as
    a page gets it)."""
    secret = (scope.get("cookies") or {}).get(settings.CSRF_COOKIE_NAME, "")
    if not secret:
        return ""
    request = HttpRequest()
    request.META["CSRF_COOKIE"] = secret
    return get_token(request)


def language_of(scope: Mapping[str, Any]) -> str:
    """The language the admin chose (its cookie), else the browser's, else the default."""
    chosen: str = (scope.get("cookies") or {}).get(settings.LANGUAGE_COOKIE_NAME, "")
    supported = {code for code, _name in settings.LANGUAGES}
    if chosen in supported:
        return chosen
    headers = dict(scope.get("headers") or [])
    accepted: str = headers.get(b"accept-language", b"").decode("latin-1")
    for part in accepted.split(","):
        code = part.split(";")[0].strip().lower()
        if code in supported:
            return code
        if code.split("-")[0] in supported:
            return code.split("-")[0]
    return settings.LANGUAGE_CODE
