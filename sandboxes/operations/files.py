"""Files under /workspace: write, read, list, delete, and a link to one without the token."""

from typing import Any

from pipelines.models import Pipeline
from sandboxes import selectors, services
from sandboxes.operations.record import Call, Context, Hints, Operation
from sandboxes.schemas.files import (
    DeleteOut,
    DeleteQuery,
    LinkIn,
    LinkOut,
    ListOut,
    ListQuery,
    ReadOut,
    ReadQuery,
    WriteIn,
    WriteOut,
    list_out,
    read_out,
    written_out,
)

FILES_PATH = "/sandboxes/{sandbox_id}/files"
_READ = Hints(read_only=True, idempotent=True, opens_chat_sandbox=True)
_CHANGE = Hints(destructive=True, idempotent=True, opens_chat_sandbox=True)


def _path_checked(pipeline: Pipeline, given: ReadQuery | ListQuery | DeleteQuery) -> None:
    services.workspace_path(given.path)


def _write_checked(pipeline: Pipeline, body: WriteIn) -> None:
    services.workspace_path(body.path)
    services.decoded_contents(body.contents, body.contents_b64)
    services.clean_mode(body.mode)


def _write(context: Context, call: Call[WriteIn]) -> Any:
    who, body = context.principal, call.given
    sandbox = selectors.sandbox_for(who, call.sandbox_id)
    size, data = services.decoded_contents(body.contents, body.contents_b64)
    return services.write_file(
        sandbox,
        body.path,
        data,
        who.actor,
        size=size,
        mode=body.mode,
        overwrite=body.overwrite,
        holder=body.holder,
        epoch=body.epoch,
    )


def _read(context: Context, call: Call[ReadQuery]) -> tuple[str, Any]:
    sandbox = selectors.sandbox_for(context.principal, call.sandbox_id)
    content = services.read_file(sandbox, call.given.path, call.given.max_bytes)
    return services.workspace_path(call.given.path), content


def _list(context: Context, call: Call[ListQuery]) -> tuple[Any, bool]:
    sandbox = selectors.sandbox_for(context.principal, call.sandbox_id)
    return services.list_files(sandbox, call.given.path, call.given.recursive)


def _delete(context: Context, call: Call[DeleteQuery]) -> str:
    who, query = context.principal, call.given
    sandbox = selectors.sandbox_for(who, call.sandbox_id)
    return services.delete_file(
        sandbox, query.path, who.actor, recursive=query.recursive, holder=query.holder,
        epoch=query.epoch,
    )  # fmt: skip


def _link_checked(pipeline: Pipeline, body: LinkIn) -> None:
    services.clean_link(body.path, body.expires_in_seconds)


def _link(context: Context, call: Call[LinkIn]) -> tuple[Any, str]:
    """The link, and its URL at the origin the caller reached."""
    who, body = context.principal, call.given
    sandbox = selectors.sandbox_for(who, call.sandbox_id)
    link = services.create_link(
        sandbox,
        body.path,
        who.actor,
        method=body.method,
        expires_in_seconds=body.expires_in_seconds,
        holder=body.holder,
        epoch=body.epoch,
    )
    return link, f"{context.origin}/links/{link.token}"


def _link_out(made: tuple[Any, str]) -> dict[str, Any]:
    link, url = made
    return {"url": url, "path": link.path, "method": link.method, "expires_at": link.expires_at}


WRITE = Operation[WriteIn, Any](
    name="sandbox_fs_write",
    summary="Write a file",
    method="PUT",
    path=FILES_PATH,
    input=WriteIn,
    output=WriteOut,
    service=_write,
    present=written_out,
    check=_write_checked,
    title="Write a file",
    description=(
        "Write a file in the sandbox's /workspace, creating parent directories. Give text "
        "in contents, or binary data base64-encoded in contents_b64 (not both). The file "
        "persists between calls and between messages of this conversation."
    ),
    hints=_CHANGE,
)

READ = Operation[ReadQuery, tuple[str, Any]](
    name="sandbox_fs_read",
    summary="Read a file",
    method="GET",
    path=FILES_PATH,
    input=ReadQuery,
    output=ReadOut,
    service=_read,
    present=lambda read: read_out(*read),
    check=_path_checked,
    title="Read a file",
    description=(
        "Read a file from the sandbox's /workspace. Returns contents (text) or "
        "contents_b64 (binary), size_bytes, and truncated when the file is longer than "
        "max_bytes or the read limit; read large files in parts with sandbox_exec (head, "
        "tail, sed -n) instead, or hand them over with sandbox_fs_link."
    ),
    hints=_READ,
)

LIST = Operation[ListQuery, tuple[Any, bool]](
    name="sandbox_fs_list",
    summary="List a directory",
    method="GET",
    path=FILES_PATH + "/list",
    input=ListQuery,
    output=ListOut,
    service=_list,
    present=lambda listed: list_out(*listed),
    check=_path_checked,
    title="List a directory",
    description=(
        "List a directory of the sandbox's /workspace: entries with path, type (file, dir, "
        "symlink), size, mode and mtime_unix. Skills of this bot are under .skills/."
    ),
    hints=_READ,
)

DELETE = Operation[DeleteQuery, str](
    name="sandbox_fs_delete",
    summary="Delete a file",
    method="DELETE",
    path=FILES_PATH,
    input=DeleteQuery,
    output=DeleteOut,
    service=_delete,
    present=lambda deleted: {"ok": True, "deleted": deleted},
    check=_path_checked,
    title="Delete a file",
    description=(
        "Delete a file or directory in the sandbox's /workspace. A directory that is not "
        "empty needs recursive: true. Deleting cannot be undone."
    ),
    hints=_CHANGE,
)

LINK = Operation[LinkIn, tuple[Any, str]](
    name="sandbox_fs_link",
    summary="Make a link that downloads or uploads one file without the token",
    method="POST",
    path=FILES_PATH + "/links",
    status=201,
    input=LinkIn,
    output=LinkOut,
    service=_link,
    present=_link_out,
    check=_link_checked,
    title="Link to a file",
    description=(
        "Make a link to one file of the sandbox's /workspace that works without any token "
        "until it expires: method GET lets the user download the file (give the url to the "
        "user to hand them a chart, a report or a zip), PUT lets the user upload to that "
        "path (e.g. curl -T file URL). Returns url and expires_at."
    ),
    hints=Hints(opens_chat_sandbox=True),
)
