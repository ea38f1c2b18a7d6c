"""File paths at the kernel's limits, through the bot API and the dashboard.

A name longer than NAME_MAX (255 bytes, counted in UTF-8) or a path longer than PATH_MAX (4096
bytes with its terminating NUL) is bad input: every file call answers 400 naming `path`
before anything runs in the sandbox, instead of the sandbox's "File name too long" coming
back as a 502. A name of exactly 255 bytes still works, so the limit is the kernel's and no
tighter. The dashboard's file view and download answer a path outside /workspace with the
page and its error, its upload with a 400 naming the path; never a 500.
"""

import posixpath
import uuid
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.utils.html import escape

from boxyard.errors import InvalidInput
from sandboxes import services
from tests.api.conftest import Bot, _bot
from tests.conftest import CHAT

NAME_MAX = 255
PATH_MAX = 4096

# A path of exactly PATH_MAX bytes made of names that are each within NAME_MAX: only its
# length is wrong.
_SEGMENT = "d" * 200 + "/"
_DEEP = "/workspace/" + _SEGMENT * ((PATH_MAX - len("/workspace/")) // len(_SEGMENT))
FULL_LENGTH = _DEEP + "f" * (PATH_MAX - len(_DEEP.encode()))
assert len(FULL_LENGTH.encode()) == PATH_MAX

TOO_LONG = {
    "256 ASCII bytes": "a" * 256,
    "256 UTF-8 bytes in 128 characters": "é" * 128,
    "a directory of 256 bytes": "d" * 256 + "/notes.txt",
    "a path of PATH_MAX bytes": FULL_LENGTH,
    "a path of PATH_MAX bytes in 2-byte characters": "/workspace/" + ("é" * 100 + "/") * 21,
}
JUST_RIGHT = {
    "255 ASCII bytes": "a" * 255,
    "255 UTF-8 bytes": "é" * 127 + "a",
}


@pytest.fixture
def support(make_pipeline: Any) -> Bot:
    return _bot(make_pipeline(slug="support"))


@pytest.fixture
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]


@pytest.fixture
def box_id(support: Bot, docker_engine: Any, _hosts: None) -> str:
    opened = support.call("post", "/sandboxes/open", {"pipeline": "support", "variables": CHAT})
    assert opened.status_code == 200, opened.content
    return str(opened.json()["sandbox_id"])


def _at(bot: Bot, method: str, route: str, path: str) -> Any:
    """A call whose `path` goes in the query string."""
    return getattr(bot.client, method)(f"/api/v1{route}?{urlencode({'path': path})}")


def _file_calls(bot: Bot, box_id: str, path: str) -> dict[str, Any]:
    base = f"/sandboxes/{box_id}/files"
    return {
        "PUT /files": bot.call("put", base, {"path": path, "contents": "x"}),
        "GET /files": _at(bot, "get", base, path),
        "GET /files/list": _at(bot, "get", f"{base}/list", path),
        "DELETE /files": _at(bot, "delete", base, path),
    }


def _assert_names_path(response: Any, label: str) -> None:
    assert response.status_code == 400, (label, response.status_code, response.content[:300])
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and error["field"] == "path", (label, error)


@pytest.mark.docker
@pytest.mark.django_db
def test_a_name_or_path_past_the_kernels_limits_is_400_naming_path(
    support: Bot, box_id: str
) -> None:
    for case, path in TOO_LONG.items():
        for call, response in _file_calls(support, box_id, path).items():
            _assert_names_path(response, f"{call} with {case}")
    error = support.call(
        "put", f"/sandboxes/{box_id}/files", {"path": "a" * 256, "contents": "x"}
    ).json()
    assert "255 bytes" in error["error"]["message"], error


@pytest.mark.docker
@pytest.mark.django_db
def test_names_of_exactly_NAME_MAX_bytes_work(support: Bot, box_id: str) -> None:
    base = f"/sandboxes/{box_id}/files"
    for case, name in JUST_RIGHT.items():
        assert len(name.encode()) == NAME_MAX
        wrote = support.call("put", base, {"path": name, "contents": case})
        assert wrote.status_code == 200, (case, wrote.content[:300])
        read = _at(support, "get", base, name)
        assert read.status_code == 200 and read.json()["contents"] == case, (
            case,
            read.content[:300],
        )
        listed = _at(support, "get", f"{base}/list", "/workspace")
        assert f"/workspace/{name}" in {entry["path"] for entry in listed.json()["entries"]}, case
        assert _at(support, "delete", base, name).status_code == 200, case


@pytest.mark.docker
@pytest.mark.django_db
def test_a_path_just_under_PATH_MAX_works(support: Bot, box_id: str) -> None:
    """4095 bytes and the NUL: the longest path the kernel takes, with a long last name."""
    longest = FULL_LENGTH[:-1]
    base = f"/sandboxes/{box_id}/files"
    wrote = support.call("put", base, {"path": longest, "contents": "deep"})
    assert wrote.status_code == 200, wrote.content[:300]
    read = _at(support, "get", base, longest)
    assert read.status_code == 200 and read.json()["contents"] == "deep", read.content[:300]


@pytest.mark.docker
@pytest.mark.django_db
def test_a_short_name_at_the_bottom_of_a_path_just_under_PATH_MAX_works(
    support: Bot, box_id: str
) -> None:
    """The write's temporary file beside the target would be longer than the target itself:
    it is made by a relative name, so only the target's own length counts."""
    deep = "/workspace/" + ("d" * 200 + "/") * 20
    target = deep + "e" * (PATH_MAX - 1 - len(deep) - 2) + "/f"
    assert len(target.encode()) == PATH_MAX - 1
    base = f"/sandboxes/{box_id}/files"
    wrote = support.call("put", base, {"path": target, "contents": "short"})
    assert wrote.status_code == 200, wrote.content[:300]
    assert _at(support, "get", base, target).json()["contents"] == "short"
    assert _at(support, "delete", base, target).status_code == 200


def test_the_lexical_check_counts_bytes_without_a_sandbox() -> None:
    """The same limits, before any sandbox is involved (the check every file call makes)."""
    for case, path in TOO_LONG.items():
        with pytest.raises(InvalidInput) as refused:
            services.files.workspace_path(path)
        assert refused.value.as_dict()["field"] == "path", case
    for name in JUST_RIGHT.values():
        assert services.files.workspace_path(name) == posixpath.join("/workspace", name)
    assert services.files.workspace_path(FULL_LENGTH[:-1]) == FULL_LENGTH[:-1]


# --- the dashboard ------------------------------------------------------------------------------


@pytest.fixture
def admin_client(django_user_model: Any) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("alice", password="x", is_staff=True))
    return client


OUTSIDE = ["/etc/passwd", "../../etc/passwd", "/workspace/../etc", "a\x00b", "a" * 256]


@pytest.mark.django_db
def test_the_dashboards_file_view_shows_the_error_for_a_path_outside(
    admin_client: Client, pipeline: Any, fake_runtime: Any, bot: Any, _hosts: None
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    engine_calls = len(fake_runtime.execs)
    for path in OUTSIDE:
        for query in ({"path": path}, {"path": path, "view": "1"}):
            page = admin_client.get(f"/sandboxes/{sandbox.pk}/files", query)
            assert page.status_code == 200, (query, page.status_code)
            text = page.content.decode()
            assert 'id="files-view"' in text and 'class="error" role="alert"' in text, (
                query,
                text[:500],
            )
    assert len(fake_runtime.execs) == engine_calls  # refused before anything ran


@pytest.mark.django_db
def test_the_dashboards_download_shows_the_error_for_a_path_outside(
    admin_client: Client, pipeline: Any, fake_runtime: Any, bot: Any, _hosts: None
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    for path in [*OUTSIDE, ""]:
        with pytest.raises(InvalidInput) as refused:
            services.files.workspace_path(path)
        page = admin_client.get(f"/sandboxes/{sandbox.pk}/files/download", {"path": path})
        assert page.status_code == 400, (path, page.status_code)
        assert page["Content-Type"].startswith("text/html"), page["Content-Type"]
        text = page.content.decode()
        assert 'role="alert"' in text and escape(refused.value.message) in text, (path, text[:800])
        assert f'href="/sandboxes/{sandbox.pk}/"' in text  # the way back to the sandbox


@pytest.mark.django_db
def test_the_dashboards_upload_to_a_path_outside_is_refused_naming_it(
    admin_client: Client, pipeline: Any, fake_runtime: Any, bot: Any, _hosts: None
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    engine_calls = len(fake_runtime.execs)

    def upload(path: str) -> Any:
        return admin_client.put(
            f"/sandboxes/{sandbox.pk}/files/upload?{urlencode({'path': path})}",
            b"x",
            content_type="application/octet-stream",
        )

    etc = upload("/etc/passwd")
    assert etc.status_code == 400
    assert etc.json()["error"]["message"] == "path: '/etc/passwd' is outside /workspace"
    for path in [*OUTSIDE, "/workspace"]:
        with pytest.raises(InvalidInput) as refused:
            services.write_file(sandbox, path, b"x", bot)
        sent = upload(path)
        assert sent.status_code == 400, (path, sent.status_code)
        assert sent.json()["error"] == refused.value.as_dict(), path
    assert len(fake_runtime.execs) == engine_calls  # refused before anything ran


def test_an_unknown_sandbox_is_still_404(admin_client: Client, db: None, _hosts: None) -> None:
    assert (
        admin_client.get(f"/sandboxes/{uuid.uuid4()}/files/download", {"path": "/etc"}).status_code
        == 404
    )
