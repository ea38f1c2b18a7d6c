"""Files as the bot API takes and shows them (JSON: text, or base64 for binary), with the
presenters that turn the services' answers into them."""

import base64
from datetime import datetime
from typing import Annotated, Any

from django.conf import settings
from ninja import Field, Schema
from pydantic import ConfigDict

from sandboxes.schemas.common import (
    B64,
    MODE,
    NO_NUL,
    WHOLE,
    Fencing,
    FencingQuery,
    present,
    together,
)
from sandboxes.services.files import (
    ArchiveFormat,
    FileContent,
    FileEntry,
    LinkMethod,
    Written,
)

PATH = "File path, relative to /workspace."


def path_field(default: Any = ..., description: str = PATH) -> Any:
    """A path under /workspace as the services take it: 1 to 4096 characters, no NUL."""
    return Field(default, min_length=1, max_length=4096, pattern=NO_NUL, description=description)


class WriteIn(Fencing):
    # Text or base64, not both (the service says so); neither writes an empty file.
    model_config = ConfigDict(
        json_schema_extra={
            "not": together(
                present("contents", {"type": "string"}), present("contents_b64", {"type": "string"})
            )
        }
    )

    path: str = path_field()
    contents: str | None = Field(None, description="Text contents (UTF-8).")
    contents_b64: str | None = Field(
        None, pattern=B64, description="Binary contents, base64-encoded."
    )
    mode: str | None = Field(
        None, pattern=MODE, description='Octal permissions such as "0644" (the default) or "0755".'
    )
    overwrite: bool = Field(
        True, description="Replace an existing file (default true); false fails if it exists."
    )


class WriteOut(Schema):
    """A file written, however it came (JSON, a byte stream, a link, the dashboard)."""

    ok: bool
    path: str
    size_bytes: int
    sha256: str = Field(description="The SHA-256 of the bytes written, in hex.")


class ReadOut(Schema):
    path: str
    contents: str | None = None
    contents_b64: str | None = None
    truncated: bool
    size_bytes: int


class EntryOut(Schema):
    path: str
    name: str
    type: str
    size: int
    mode: str
    mtime_unix: int


class ListOut(Schema):
    entries: list[EntryOut]
    truncated: bool


class DeleteOut(Schema):
    ok: bool
    deleted: str


class ReadQuery(Schema):
    path: str = path_field()
    max_bytes: int | None = Field(
        None,
        ge=0,
        le=settings.BOXYARD_MAX_OUTPUT_BYTES,
        description="Read at most this many bytes (default: the read limit; at most "
        "BOXYARD_MAX_OUTPUT_BYTES).",
    )


class ListQuery(Schema):
    path: str = path_field(
        "/workspace", "Directory, relative to /workspace (default: /workspace itself)."
    )
    recursive: bool = Field(False, description="Also list everything below it (default false).")


class DeleteQuery(FencingQuery):
    path: str = path_field(description="Path to delete, relative to /workspace.")
    recursive: bool = Field(
        False, description="Delete a directory with everything in it (default false)."
    )


class RawWriteQuery(FencingQuery):
    path: str = path_field()
    mode: str | None = Field(None, pattern=MODE, description="Octal permissions, default '0644'.")
    overwrite: bool = True


class RawReadQuery(Schema):
    path: str = path_field()


class ArchiveQuery(Schema):
    path: str = path_field("/workspace", "Directory, relative to /workspace.")
    format: ArchiveFormat = Field("tar.gz", description="tar, tar.gz (the default) or zip")


class ExtractQuery(FencingQuery):
    path: str = path_field("/workspace", "Directory, relative to /workspace.")
    format: ArchiveFormat = Field("tar.gz", description="tar, tar.gz (the default) or zip")


class ExtractOut(Schema):
    ok: bool
    path: str
    entries: int
    size_bytes: int


class LinkIn(Fencing):
    path: str = path_field()
    method: LinkMethod = Field(
        "GET", description="GET: a download link (the default); PUT: an upload."
    )
    expires_in_seconds: (
        Annotated[int, Field(ge=1, le=settings.BOXYARD_FILE_LINK_MAX_SECONDS), WHOLE] | None
    ) = Field(
        None,
        description="How long the link works (default one hour; at most "
        "BOXYARD_FILE_LINK_MAX_SECONDS).",
    )


class LinkOut(Schema):
    url: str
    path: str
    method: str
    expires_at: datetime


def written_out(written: Written) -> dict[str, Any]:
    """The one presenter of a file written, for every door that writes one."""
    return {
        "ok": True,
        "path": written.path,
        "size_bytes": written.size_bytes,
        "sha256": written.sha256,
    }


def read_out(path: str, content: FileContent) -> dict[str, Any]:
    """Text as it is; anything that is not UTF-8 as base64."""
    shown: dict[str, Any] = {
        "path": path,
        "truncated": content.truncated,
        "size_bytes": content.size_bytes,
    }
    try:
        shown["contents"] = content.data.decode("utf-8")
    except UnicodeDecodeError:
        shown["contents_b64"] = base64.b64encode(content.data).decode()
    return shown


def list_out(entries: list[FileEntry], truncated: bool) -> dict[str, Any]:
    return {"entries": [EntryOut(**entry.__dict__) for entry in entries], "truncated": truncated}
