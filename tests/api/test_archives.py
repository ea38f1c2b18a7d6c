"""Directories as archives: `GET` and `PUT /api/v1/sandboxes/{id}/files/archive`, against the
real engine. A tree goes out as tar, tar.gz and zip and comes back in elsewhere whole; every
hostile archive is refused with a 400 naming its entry, and leaves nothing behind."""

import gzip
import io
import tarfile
import zipfile
from typing import Any
from urllib.parse import urlencode

import pytest

from sandboxes import services
from sandboxes.models import Event
from tests.api.conftest import Bot, _bot
from tests.api.test_raw_files import content
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


@pytest.fixture
def box(support: Bot, bot: Any, docker_engine: Any) -> Any:
    sandbox = services.open_sandbox(support.pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "mkdir -p tree/sub tree/empty && printf one > tree/a.txt"
        " && printf two > tree/sub/b.txt && ln -s sub/b.txt tree/link")  # fmt: skip
    return sandbox


def run(sandbox: Any, actor: Any, cmd: str) -> Any:
    result = services.run_exec(sandbox, services.clean_request(sandbox, cmd=cmd), actor)
    assert result.exit_code == 0, result.stderr
    return result


def url(sandbox: Any, **query: Any) -> str:
    return f"/api/v1/sandboxes/{sandbox.pk}/files/archive?{urlencode(query)}"


def names(sandbox: Any, actor: Any, path: str = "/workspace/in") -> list[str]:
    found = run(sandbox, actor, f"mkdir -p {path} && cd {path} && find . | sort").stdout
    return [line for line in found.splitlines() if line != "."]


def tar_of(*members: tuple[tarfile.TarInfo, bytes], gz: bool = False) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gz else "w", format=tarfile.PAX_FORMAT) as out:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            out.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


def test_a_directory_goes_out_and_comes_back_in_every_format(
    support: Bot, bot: Any, box: Any
) -> None:
    for form in ("tar", "tar.gz", "zip"):
        response = support.client.get(url(box, path="tree", format=form))
        assert response.status_code == 200
        assert response["Content-Disposition"] == f'attachment; filename="tree.{form}"'
        data = content(response)
        if form == "zip":
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                listed = sorted(archive.namelist())
                assert archive.read("sub/b.txt") == b"two"
        else:
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                listed = sorted(archive.getnames())
                assert archive.getmember("link").linkname == "sub/b.txt"
        assert [name.rstrip("/") for name in listed] == [
            "a.txt", "empty", "link", "sub", "sub/b.txt"
        ]  # fmt: skip
        back = support.client.put(
            url(box, path=f"copy-{form}", format=form),
            data,
            content_type="application/octet-stream",
        )
        assert back.status_code == 201, back.content
        assert back.json()["entries"] == 5
        copied = run(box, bot, f"cat copy-{form}/a.txt copy-{form}/link; ls -d copy-{form}/empty")
        assert copied.stdout == f"onetwocopy-{form}/empty\n"
    event = Event.objects.filter(sandbox=box, action="files.extracted").latest("id")
    assert event.detail["format"] == "zip" and event.detail["entries"] == 5


HOSTILE = {
    "absolute": ([(entry("/etc/evil"), b"x")], "/etc/evil", "absolute"),
    "dotdot": ([(entry("../evil"), b"x")], "../evil", '".."'),
    "symlink out": ([(entry("l", tarfile.SYMTYPE, "../../etc"), b"")], "l", "outside"),
    "absolute symlink": ([(entry("l", tarfile.SYMTYPE, "/etc/passwd"), b"")], "l", "absolute"),
    "symlink chain": (
        [(entry("a", tarfile.SYMTYPE, "."), b""), (entry("b", tarfile.SYMTYPE, "a/.."), b"")],
        "b",
        "another link",
    ),
    "through a symlink": (
        [
            (entry("d", tarfile.DIRTYPE), b""),
            (entry("l", tarfile.SYMTYPE, "d"), b""),
            (entry("l/x"), b"x"),
        ],
        "l/x",
        "not a directory",
    ),
    "hardlink out": ([(entry("h", tarfile.LNKTYPE, "../../etc/passwd"), b"")], "h", "not a file"),
    "hardlink to nothing": ([(entry("h", tarfile.LNKTYPE, "later"), b"")], "h", "not a file"),
    "device": ([(entry("dev", tarfile.CHRTYPE), b"")], "dev", "device"),
    "fifo": ([(entry("pipe", tarfile.FIFOTYPE), b"")], "pipe", "FIFO"),
    "twice": ([(entry("t"), b"1"), (entry("t"), b"2")], "t", "twice"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_archive_is_refused_naming_its_entry_and_leaves_nothing(
    case: str, support: Bot, bot: Any, box: Any
) -> None:
    members, name, reason = HOSTILE[case]
    run(box, bot, "mkdir -p in && printf keep > in/kept")
    data = tar_of((entry("fine.txt"), b"fine"), *members)
    refused = support.client.put(url(box, path="in", format="tar"), data, content_type="x/y")
    assert refused.status_code == 400, refused.content
    error = refused.json()["error"]
    assert (error["field"], error["entry"]) == ("archive", name)
    assert reason in error["message"], error["message"]
    assert names(box, bot) == ["./kept"]  # not even fine.txt, nor the extraction's own directory


def test_bombs_truncation_and_a_full_disk_are_refused(
    support: Bot, bot: Any, box: Any, settings: Any
) -> None:
    run(box, bot, "mkdir -p in")
    # More entries than allowed.
    settings.BOXYARD_ARCHIVE_MAX_ENTRIES = 3
    many = tar_of(*[(entry(f"f{i}"), b"x") for i in range(5)])
    refused = support.client.put(url(box, path="in", format="tar"), many, content_type="x/y")
    assert refused.status_code == 400 and refused.json()["error"]["entry"] == "f3"
    settings.BOXYARD_ARCHIVE_MAX_ENTRIES = 100
    # A zip bomb: 64 MiB of zeros in a few KiB, against 16 MiB allowed.
    settings.BOXYARD_ARCHIVE_MAX_BYTES = 16 * 1024 * 1024
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.bin", bytes(64 * 1024 * 1024))
    assert len(bomb.getvalue()) < 1024 * 1024
    refused = support.client.put(
        url(box, path="in", format="zip"), bomb.getvalue(), content_type="x/y"
    )
    assert refused.status_code == 400 and refused.json()["error"]["entry"] == "zeros.bin"
    assert "expands past" in refused.json()["error"]["message"]
    # A truncated tar.gz.
    whole = tar_of((entry("big.bin"), bytes(range(256)) * 4096), gz=True)
    refused = support.client.put(
        url(box, path="in", format="tar.gz"), whole[: len(whole) // 2], content_type="x/y"
    )
    assert refused.status_code == 400 and "truncated" in refused.json()["error"]["message"]
    # A file where the directory has a directory.
    run(box, bot, "mkdir -p in/taken")
    clash = tar_of((entry("taken"), b"x"))
    refused = support.client.put(url(box, path="in", format="tar"), clash, content_type="x/y")
    assert refused.status_code == 400 and refused.json()["error"]["entry"] == "taken"
    assert names(box, bot) == ["./taken"]
    # A destination through a symlink that leads out: refused, and nothing is made out there.
    run(box, bot, "ln -s /tmp /workspace/out")
    outside = support.client.put(url(box, path="out/new", format="tar"), clash, content_type="x/y")
    assert outside.status_code == 400, outside.content
    assert "outside /workspace" in outside.json()["error"]["message"]
    assert run(box, bot, "ls /tmp").stdout == ""
    assert support.client.get(url(box, path="in", format="rar")).status_code == 400
    assert support.client.get(url(box, path="/etc", format="tar")).status_code == 400
    assert support.client.get(url(box, path="tree/a.txt", format="tar")).status_code == 400


def test_an_archive_past_the_workspace_is_507_and_leaves_nothing(
    bot: Any, make_pipeline: Any, docker_engine: Any
) -> None:
    small = make_pipeline(slug="small-archives", workspace_mb=64)
    sandbox = services.open_sandbox(small, CHAT, bot).sandbox
    run(sandbox, bot, "mkdir -p in && head -c 41943040 /dev/zero > filler")
    data = tar_of(
        (entry("a.bin"), bytes(24 * 1024 * 1024)), (entry("b.bin"), bytes(8 * 1024 * 1024))
    )
    owner = _bot(small)
    full = owner.client.put(url(sandbox, path="in", format="tar"), data, content_type="x/y")
    assert full.status_code == 507, full.content
    assert names(sandbox, bot) == []


def test_another_pipeline_cannot_reach_the_archives(billing: Bot, box: Any) -> None:
    assert billing.client.get(url(box, path="tree")).status_code == 404
    data = tar_of((entry("x"), b"x"))
    assert billing.client.put(url(box, path="in"), data, content_type="x/y").status_code == 404


def test_an_archive_merges_into_a_directory_that_exists(support: Bot, bot: Any, box: Any) -> None:
    run(box, bot, "mkdir -p in/sub && printf old > in/a.txt && printf mine > in/sub/mine.txt")
    data = tar_of((entry("a.txt"), b"new"), (entry("sub/b.txt"), b"b"))
    done = support.client.put(url(box, path="in", format="tar"), data, content_type="x/y")
    assert done.status_code == 201 and done.json()["size_bytes"] == 4
    merged = run(box, bot, "cat in/a.txt in/sub/mine.txt in/sub/b.txt").stdout
    assert merged == "newmineb"  # the file replaced, the directory merged
    # Several gzip streams one after the other are one archive, as gzip has it.
    whole = tar_of((entry("more.txt"), b"more"))
    data = gzip.compress(whole[:700]) + gzip.compress(whole[700:])
    done = support.client.put(url(box, path="in", format="tar.gz"), data, content_type="x/y")
    assert done.status_code == 201 and run(box, bot, "cat in/more.txt").stdout == "more"
    # Without a format, a directory goes out as tar.gz.
    default = content(support.client.get(url(box, path="in")))
    assert default[:2] == b"\x1f\x8b"


def test_the_dashboard_downloads_a_directory_as_a_zip(
    box: Any, django_user_model: Any, settings: Any
) -> None:
    from django.test import Client

    admin = Client()
    admin.force_login(django_user_model.objects.create_user("root", password="x", is_staff=True))
    page = admin.get(f"/sandboxes/{box.pk}/files", {"path": "/workspace"})
    assert "files/archive?path=/workspace/tree" in page.content.decode()  # a link per directory
    response = admin.get(f"/sandboxes/{box.pk}/files/archive", {"path": "/workspace/tree"})
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(content(response))) as archive:
        assert archive.read("a.txt") == b"one"
    refused = admin.get(f"/sandboxes/{box.pk}/files/archive", {"path": "/etc"})
    assert refused.status_code == 400 and 'role="alert"' in refused.content.decode()


def _damaged() -> dict[str, tuple[str, bytes, str]]:
    whole = tar_of((entry("fine.txt"), b"fine"))
    assert whole[1024:] == bytes(len(whole) - 1024)  # one entry, then the end blocks and padding
    packed = gzip.compress(whole)
    bad_crc = bytearray(packed)
    bad_crc[-8] ^= 0xFF
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("fine.txt", "fine")
    zipped = buffer.getvalue()
    return {
        # format, data, what the refusal says
        "tar cut between entries": ("tar", whole[:1024], "end-of-archive"),
        "tar.gz cut between entries": ("tar.gz", gzip.compress(whole[:1024]), "end-of-archive"),
        "gzip without its trailer": ("tar.gz", packed[:-8], "truncated"),
        "gzip with a wrong CRC": ("tar.gz", bytes(bad_crc), "CRC"),
        "garbage after the tar": ("tar", whole + b"garbage", "after the end of the tar"),
        "garbage after the gzip": ("tar.gz", packed + b"garbage!!!!!", "after the end of the gzip"),
        "garbage after the zip": ("zip", zipped + b"garbage", "after the end of the zip"),
    }


@pytest.mark.parametrize("case", list(_damaged()))
def test_a_damaged_archive_is_refused_whole_and_leaves_nothing(
    case: str, support: Bot, bot: Any, box: Any
) -> None:
    form, data, reason = _damaged()[case]
    run(box, bot, "mkdir -p in && printf keep > in/kept")
    refused = support.client.put(url(box, path="in", format=form), data, content_type="x/y")
    assert refused.status_code == 400, refused.content
    error = refused.json()["error"]
    assert (error["field"], error["entry"]) == ("archive", "(archive)")
    assert reason in error["message"], error["message"]
    assert names(box, bot) == ["./kept"]


def test_a_zip_entry_that_climbs_out_with_backslashes_is_refused(
    support: Bot, bot: Any, box: Any
) -> None:
    run(box, bot, "mkdir -p in")
    for name in ("..\\..\\x", "a\\..\\..\\x"):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("fine.txt", "fine")
            archive.writestr(name, "x")
        refused = support.client.put(
            url(box, path="in", format="zip"), buffer.getvalue(), content_type="x/y"
        )
        assert refused.status_code == 400, refused.content
        assert refused.json()["error"]["entry"] == name
        assert '".."' in refused.json()["error"]["message"]
        assert names(box, bot) == []


def test_a_refused_archive_takes_away_the_directories_it_made(
    support: Bot, bot: Any, box: Any
) -> None:
    run(box, bot, "mkdir -p have")
    hostile = tar_of((entry("fine.txt"), b"fine"), (entry("../evil"), b"x"))
    refused = support.client.put(
        url(box, path="have/new/deeper", format="tar"), hostile, content_type="x/y"
    )
    assert refused.status_code == 400, refused.content
    assert run(box, bot, "find have new 2>/dev/null; true").stdout == "have\n"
    truncated = tar_of((entry("fine.txt"), b"fine"))[:1024]
    refused = support.client.put(url(box, path="new", format="tar"), truncated, content_type="x/y")
    assert refused.status_code == 400, refused.content
    assert run(box, bot, "ls -d new 2>/dev/null; true").stdout == ""
