"""The edges of the bot API, through the served Boxyard (`manage.py serve`) and the real engine.

A range that ends before it starts is ignored (RFC 9110: 200 with the whole file), one past the
end is 416; a signed link asked with a method it does not take is 405 with `Allow`; request
bodies are strict (a boolean is not a number, a string is not a number) and an unknown field
is a 400 naming it, on every body; the OpenAPI document lists the statuses each route answers
(423, 507, 411) and bounds what the server bounds.
"""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pipelines.models import PipelineToken
from tests.conftest import CHAT
from tests.servers import Server

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def api(
    server: Server, make_pipeline: Any, docker_engine: Any
) -> Iterator[tuple[httpx.Client, str]]:
    """A client of the served API with a pipeline's token, and its chat's sandbox."""
    _, token = PipelineToken.issue(make_pipeline(slug="edges"), name="tests")
    with httpx.Client(
        base_url=f"{server.url}/api/v1",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    ) as client:
        opened = client.post("/sandboxes/open", json={"pipeline": "edges", "variables": CHAT})
        assert opened.status_code == 200, opened.text
        yield client, opened.json()["sandbox_id"]


def write(client: httpx.Client, sandbox_id: str, path: str, text: str) -> None:
    written = client.put(f"/sandboxes/{sandbox_id}/files", json={"path": path, "contents": text})
    assert written.status_code == 200, written.text


def test_an_invalid_range_is_ignored_and_one_past_the_end_is_416(
    api: tuple[httpx.Client, str],
) -> None:
    client, sandbox_id = api
    write(client, sandbox_id, "digits.txt", "0123456789")
    url, query = f"/sandboxes/{sandbox_id}/files/raw", {"path": "digits.txt"}
    backwards = client.get(url, params=query, headers={"Range": "bytes=5-3"})
    assert backwards.status_code == 200, backwards.text
    assert backwards.content == b"0123456789" and "Content-Range" not in backwards.headers
    part = client.get(url, params=query, headers={"Range": "bytes=3-5"})
    assert part.status_code == 206 and part.content == b"345"
    past = client.get(url, params=query, headers={"Range": "bytes=20-30"})
    assert past.status_code == 416 and past.headers["Content-Range"] == "bytes */10"


def test_a_link_asked_with_another_method_is_405_naming_its_methods(
    server: Server, api: tuple[httpx.Client, str]
) -> None:
    client, sandbox_id = api
    write(client, sandbox_id, "report.txt", "the report")
    links = f"/sandboxes/{sandbox_id}/files/links"
    download = client.post(links, json={"path": "report.txt"}).json()["url"]
    upload = client.post(links, json={"path": "inbox.txt", "method": "PUT"}).json()["url"]
    with httpx.Client(timeout=30) as anyone:  # no token: the link is the credential
        for method in ("POST", "DELETE", "OPTIONS", "PATCH"):
            refused = anyone.request(method, download)
            assert refused.status_code == 405, (method, refused.text)
            assert refused.headers["Allow"] == "GET, HEAD"
            assert refused.json()["error"]["code"] == "method_not_allowed"
            refused = anyone.request(method, upload)
            assert refused.status_code == 405 and refused.headers["Allow"] == "PUT"
        forged = anyone.post(f"{server.url}/links/not-a-link")
        assert forged.status_code == 405 and forged.headers["Allow"] == "GET, HEAD, PUT"
        assert anyone.get(download).content == b"the report"  # the link still works


def test_request_bodies_are_strict(api: tuple[httpx.Client, str]) -> None:
    client, sandbox_id = api
    links = f"/sandboxes/{sandbox_id}/files/links"
    for wrong in (True, "60", 1.5, 0):
        refused = client.post(links, json={"path": "a.txt", "expires_in_seconds": wrong})
        assert refused.status_code == 400, (wrong, refused.text)
        assert refused.json()["error"]["field"] == "expires_in_seconds"
    made = client.post(links, json={"path": "a.txt", "expires_in_seconds": 60.0})
    assert made.status_code == 201, made.text  # JSON's 60.0 is the integer 60
    execs = f"/sandboxes/{sandbox_id}/exec"
    for field, wrong in (("timeout_seconds", True), ("background", 1), ("cmd", "")):
        refused = client.post(execs, json={"cmd": "true", field: wrong})
        assert refused.status_code == 400, (field, refused.text)
        assert refused.json()["error"]["field"] == field
    refused = client.put(
        f"/sandboxes/{sandbox_id}/files", json={"path": "b.txt", "contents": "x", "overwrite": 0}
    )
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "overwrite"


def test_an_unknown_field_of_any_body_is_a_400_naming_it(api: tuple[httpx.Client, str]) -> None:
    client, sandbox_id = api
    base = f"/sandboxes/{sandbox_id}"
    calls: list[tuple[str, str, dict[str, Any], str]] = [
        ("PUT", f"{base}/files", {"path": "notes.txt", "content": "hello"}, "content"),
        ("POST", f"{base}/exec", {"cmd": "true", "timeout": 5}, "timeout"),
        ("POST", f"{base}/files/links", {"path": "notes.txt", "expires": 60}, "expires"),
        ("POST", f"{base}/sessions", {"name": "build", "dir": "/tmp"}, "dir"),
        ("POST", f"{base}/keepalive", {"holdr": "me"}, "holdr"),
        ("POST", "/sandboxes/open", {"pipeline": "edges", "vars": CHAT}, "vars"),
        ("POST", "/run", {"pipeline": "edges", "language": "sh", "code": "", "file": {}}, "file"),
    ]
    for method, path, body, unknown in calls:
        refused = client.request(method, path, json=body)
        assert refused.status_code == 400, (path, refused.text)
        error = refused.json()["error"]
        assert error["field"] == unknown and error["code"] == "invalid_input", (path, error)
        assert error["message"] == f"{unknown}: is not a field of this call"
    # Nothing was written under the misspelt field.
    missing = client.get(f"{base}/files", params={"path": "notes.txt"})
    assert missing.status_code == 404, missing.text


def statuses(document: dict[str, Any], method: str, path: str) -> set[int]:
    return {int(code) for code in document["paths"][f"/api/v1{path}"][method]["responses"]}


def test_the_document_lists_what_each_route_answers_and_bounds_what_it_takes(
    server: Server,
) -> None:
    document = httpx.get(f"{server.url}/api/v1/openapi.json", timeout=30).json()
    box = "/sandboxes/{sandbox_id}"
    assert {423, 507} <= statuses(document, "put", f"{box}/files")
    assert {411, 423, 507} <= statuses(document, "put", f"{box}/files/raw")
    assert {411, 423, 507} <= statuses(document, "put", f"{box}/files/archive")
    assert 423 in statuses(document, "post", f"{box}/exec")
    assert 423 in statuses(document, "delete", box)
    assert {206, 304, 412, 416} <= statuses(document, "get", f"{box}/files/raw")
    assert not {411, 423, 507} & statuses(document, "get", f"{box}/files")
    assert not {411, 507} & statuses(document, "post", f"{box}/exec")
    archive = document["paths"][f"/api/v1{box}/files/archive"]["get"]
    assert set(archive["responses"]["200"]["content"]) == {
        "application/x-tar",
        "application/gzip",
        "application/zip",
    }
    formats = {p["name"]: p["schema"] for p in archive["parameters"]}["format"]
    assert formats["enum"] == ["tar", "tar.gz", "zip"]
    schemas = document["components"]["schemas"]
    shell = schemas["ExecIn"]["properties"]["cmd"]["anyOf"][1]
    assert shell["type"] == "string" and "\\S" in shell["pattern"]  # "" and "  " are refused
    assert schemas["LinkIn"]["properties"]["method"]["enum"] == ["GET", "PUT"]
    assert schemas["SessionIn"]["properties"]["name"]["pattern"].startswith("^[A-Za-z0-9]")
    for name in ("ExecIn", "WriteIn", "LinkIn", "SessionIn", "OpenIn", "RunIn", "Fencing"):
        assert schemas[name]["additionalProperties"] is False, name
    read = document["paths"][f"/api/v1{box}/files"]["get"]["parameters"]
    max_bytes = {p["name"]: p["schema"] for p in read}["max_bytes"]["anyOf"][0]
    assert max_bytes["maximum"] > 0
