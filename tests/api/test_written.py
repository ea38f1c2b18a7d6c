"""A file written is presented once, by `schemas.files.written_out`, whichever door wrote it:
the JSON write (the record's presenter, MCP's too), the byte stream, an upload link and the
dashboard's upload answer with the same fields for the same bytes, against the real engine."""

import hashlib
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from sandboxes import services
from sandboxes.services import Actor
from tests.api.conftest import Bot
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

DATA = b"the same bytes, whichever door\n"


def test_every_door_presents_a_written_file_alike(
    support: Bot, bot: Actor, admin_client: Client, alice_actor: Actor, docker_engine: Any
) -> None:
    sandbox = services.open_sandbox(support.pipeline, CHAT, bot).sandbox
    files = f"/sandboxes/{sandbox.pk}/files"

    def expected(name: str) -> dict[str, Any]:
        return {
            "ok": True,
            "path": f"/workspace/{name}",
            "size_bytes": len(DATA),
            "sha256": hashlib.sha256(DATA).hexdigest(),
        }

    json_door = support.call("put", files, {"path": "json.txt", "contents": DATA.decode()})
    assert (json_door.status_code, json_door.json()) == (200, expected("json.txt"))

    raw = support.client.put(
        f"/api/v1{files}/raw?path=raw.txt", DATA, content_type="application/octet-stream"
    )
    assert (raw.status_code, raw.json()) == (201, expected("raw.txt"))

    made = support.call("post", f"{files}/links", {"path": "link.txt", "method": "PUT"})
    assert made.status_code == 201, made.content
    link = Client().put(urlsplit(made.json()["url"]).path, DATA, content_type="text/plain")
    assert (link.status_code, link.json()) == (201, expected("link.txt"))

    services.takeover_lease(sandbox, alice_actor)  # the dashboard writes under the admin's lease
    uploaded = admin_client.put(
        f"{files}/upload?path=upload.txt", DATA, content_type="application/octet-stream"
    )
    assert uploaded.status_code == 201, uploaded.content
    shown = uploaded.json()
    assert shown.pop("message") == "/workspace/upload.txt uploaded (31\xa0bytes)."
    assert shown == expected("upload.txt")
