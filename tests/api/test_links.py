"""Signed links to one file: made by the bot API, used with no token, against the real engine.
A download and an upload link work for their own path and method until they expire; a changed
token, an expired link, a closed or destroyed sandbox, another method, another pipeline and a
lease taken over since are each refused with a clear message. A link is opaque (sealed) and
a download writes no row and is no activity; an upload is an event."""

import asyncio
import base64
import json
import time
import zlib
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.apps import apps
from django.core import signing
from django.test import Client
from django.utils import timezone

from sandboxes import metrics, services
from sandboxes.models import Event, Sandbox
from tests.api.conftest import Bot
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


def body(response: Any) -> bytes:
    async def collect() -> bytes:
        return b"".join([part async for part in response.streaming_content])

    return asyncio.run(collect()) if response.streaming else response.content


def make(bot: Bot, sandbox: Any, **fields: Any) -> Any:
    return bot.call("post", f"/sandboxes/{sandbox.pk}/files/links", fields)


def local(url: str) -> str:
    return urlsplit(url).path


@pytest.fixture
def box(support: Bot, bot: Any, docker_engine: Any) -> Any:
    sandbox = services.open_sandbox(support.pipeline, CHAT, bot).sandbox
    services.write_file(sandbox, "out/chart.png", b"\x89PNG chart", bot)
    return sandbox


def test_a_download_link_works_without_the_token_for_its_file_only(support: Bot, box: Any) -> None:
    made = make(support, box, path="out/chart.png", expires_in_seconds=600)
    assert made.status_code == 201, made.content
    link = made.json()
    assert link["url"].startswith("http://testserver/links/") and link["method"] == "GET"
    anyone = Client()  # no token, no session
    got = anyone.get(local(link["url"]))
    assert got.status_code == 200 and body(got) == b"\x89PNG chart"
    assert got["Content-Type"] == "image/png" and got["Content-Disposition"].startswith(
        "attachment"
    )
    part = anyone.get(local(link["url"]), HTTP_RANGE="bytes=1-3")
    assert part.status_code == 206 and body(part) == b"PNG"
    assert anyone.head(local(link["url"]))["Content-Length"] == "10"
    # The path is in the signed token: a query cannot point the link elsewhere.
    other = anyone.get(local(link["url"]) + "?path=/workspace/secret.txt")
    assert body(other) == b"\x89PNG chart"
    refused = anyone.put(local(link["url"]), b"x", content_type="application/octet-stream")
    assert refused.status_code == 403 and "for GET, not PUT" in refused.json()["error"]["message"]
    # Downloads are counted, not recorded one row each; making the link is an event.
    assert not Event.objects.filter(sandbox=box, action="file.link_used").exists()
    assert metrics.flush_and_snapshot(support.pipeline)["pipelines"]["support"]["link_reads"] == 4
    assert Event.objects.filter(sandbox=box, action="file.link_created").count() == 1


def _rows() -> dict[str, int]:
    return {model._meta.label: model._base_manager.count() for model in apps.get_models()}


def test_a_download_writes_no_row_and_is_not_the_bots_activity(support: Bot, box: Any) -> None:
    """Anyone holding a link may fetch it at will: that neither grows the database nor keeps
    the sandbox from idling out."""
    link = local(make(support, box, path="out/chart.png").json()["url"])
    long_ago = timezone.now() - timedelta(minutes=5)
    Sandbox.objects.filter(pk=box.pk).update(last_activity_at=long_ago, idle_deadline=long_ago)
    before = _rows()
    anyone = Client()
    for _ in range(3):
        assert body(anyone.get(link)) == b"\x89PNG chart"
    assert anyone.head(link).status_code == 200
    assert anyone.get(link, HTTP_RANGE="bytes=0-3").status_code == 206
    assert _rows() == before
    after = Sandbox.objects.get(pk=box.pk)
    assert (after.last_activity_at, after.idle_deadline) == (long_ago, long_ago)
    # An upload through a link is the bot's change: an event and activity, as before.
    put = local(make(support, box, path="inbox/a.txt", method="PUT").json()["url"])
    Sandbox.objects.filter(pk=box.pk).update(last_activity_at=long_ago, idle_deadline=long_ago)
    assert anyone.put(put, b"a", content_type="text/plain").status_code == 201
    assert Event.objects.filter(sandbox=box, action="file.link_used").count() == 1
    assert Sandbox.objects.get(pk=box.pk).last_activity_at > long_ago


def _decodings(token: str) -> list[bytes]:
    """Whatever base64 (either alphabet) and zlib make of the token and of its pieces."""
    found = []
    for piece in {token, *token.replace(":", ".").split(".")}:
        for decode in (base64.urlsafe_b64decode, base64.b64decode):
            try:
                raw = decode(piece + "=" * (-len(piece) % 4))
            except ValueError:
                continue
            found.append(raw)
            try:
                found.append(zlib.decompress(raw))
            except zlib.error:
                pass
    return found


def test_a_link_is_opaque_and_any_change_to_it_is_refused(support: Bot, box: Any) -> None:
    link = local(make(support, box, path="out/chart.png").json()["url"])
    token = link.removeprefix("/links/")
    secrets = [box.scope_key, str(box.pk), box.pk.hex, "chart.png", "workspace"]
    for decoded in _decodings(token):
        assert not any(secret.encode() in decoded for secret in secrets)
        with pytest.raises(ValueError):
            json.loads(decoded)
    anyone = Client()
    assert anyone.get(link).status_code == 200
    changed = [
        token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1 :]
        for i in (0, 5, len(token) // 2, len(token) - 2, len(token) - 1)
    ]
    changed += [token[:-1], token + "A", token[:20], token[::-1], "x", token + "!!"]
    for bad in changed:
        refused = anyone.get(f"/links/{bad}")
        assert refused.status_code == 403, bad
        assert "not valid" in refused.json()["error"]["message"]
    # A link made the old way (readable, signed), with this very sandbox's claims: invalid.
    old = signing.dumps(
        {"s": str(box.pk), "g": box.generation, "p": "/workspace/out/chart.png", "m": "GET",
         "h": "", "e": 0, "x": int(time.time()) + 600},
        salt="boxyard.files.link",
        compress=True,
    )  # fmt: skip
    assert anyone.get(f"/links/{old}").status_code == 403


def test_an_upload_link_writes_its_path_under_the_lease_it_was_made_under(
    support: Bot, box: Any, alice_actor: Any
) -> None:
    link = make(support, box, path="inbox/data.csv", method="PUT").json()
    anyone = Client()
    sent = anyone.put(local(link["url"]), b"a,b\n1,2\n", content_type="text/csv")
    assert sent.status_code == 201 and sent.json()["size_bytes"] == 8
    assert services.read_file(box, "inbox/data.csv").data == b"a,b\n1,2\n"
    assert anyone.get(local(link["url"])).status_code == 403  # an upload link reads nothing
    # An admin takes the sandbox over: the bot's link is fenced off like the bot.
    services.takeover_lease(box, alice_actor, holder="admin:alice")
    late = anyone.put(local(link["url"]), b"late", content_type="text/csv")
    assert late.status_code == 423
    assert services.read_file(box, "inbox/data.csv").data == b"a,b\n1,2\n"


def test_changed_expired_and_closed_links_are_refused(
    support: Bot, billing: Bot, box: Any, bot: Any, settings: Any
) -> None:
    anyone = Client()
    link = local(make(support, box, path="out/chart.png").json()["url"])
    changed = link[:-3] + ("AAA" if not link.endswith("AAA") else "BBB")
    refused = anyone.get(changed)
    assert refused.status_code == 403 and "not valid" in refused.json()["error"]["message"]
    short = local(make(support, box, path="out/chart.png", expires_in_seconds=1).json()["url"])
    time.sleep(1.2)
    expired = anyone.get(short)
    assert expired.status_code == 403 and "expired" in expired.json()["error"]["message"]
    settings.BOXYARD_FILE_LINK_MAX_SECONDS = 60
    too_long = make(support, box, path="out/chart.png", expires_in_seconds=61)
    assert too_long.status_code == 400 and too_long.json()["error"]["field"] == "expires_in_seconds"
    assert make(support, box, path="/etc/passwd").status_code == 400
    assert make(support, box, path="x", method="DELETE").status_code == 400
    assert make(billing, box, path="out/chart.png").status_code == 404  # not billing's sandbox
    # Closed: the link dies with it, and stays dead when the sandbox starts again.
    services.close_sandbox(box, bot)
    closed = anyone.get(link)
    assert closed.status_code == 403 and "closed" in closed.json()["error"]["message"]
    again = services.open_sandbox(support.pipeline, CHAT, bot).sandbox
    assert again.pk == box.pk
    assert anyone.get(link).status_code == 403
    services.close_sandbox(again, bot, delete_workspace=True, force=True)
    gone = anyone.get(link)
    assert gone.status_code == 404 and "no longer exists" in gone.json()["error"]["message"]
