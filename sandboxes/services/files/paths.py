"""Paths and modes as callers give them, checked before anything runs in the sandbox.

Paths are checked twice: lexically here (`..` and absolute paths elsewhere are refused before
anything runs), and inside the sandbox after resolving symlinks (`sandboxes.scripts`), so a
link planted by sandbox code cannot carry a read or a write outside /workspace.
"""

import posixpath

from boxyard.errors import N_, InvalidInput
from sandboxes.scripts import WORKSPACE

MAX_PATH_LENGTH = 4096

# The kernel's limits, in bytes of the UTF-8 the sandbox sees: one name (NAME_MAX) and a whole
# path with its terminating NUL (PATH_MAX). Past them the sandbox's own tools fail with "File
# name too long"; checked here, the caller learns which field was wrong before anything runs.
NAME_MAX = 255
PATH_MAX = 4096


def workspace_path(path: str, field: str = "path") -> str:
    """The absolute, normalized path for `path`, refusing anything outside /workspace and
    any name or path the kernel would refuse as too long."""
    if not path:
        raise InvalidInput(field, N_("must be a non-empty path"))
    if "\x00" in path or len(path) > MAX_PATH_LENGTH:
        raise InvalidInput(
            field, N_("must be at most %(count)s characters, without NUL", count=MAX_PATH_LENGTH)
        )
    normalized = posixpath.normpath(posixpath.join(WORKSPACE, path))
    if normalized != WORKSPACE and not normalized.startswith(WORKSPACE + "/"):
        raise InvalidInput(field, N_("%(path)r is outside /workspace", path=path))
    try:
        size = len(normalized.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(field, N_("holds a lone surrogate escape; send valid Unicode")) from None
    if size >= PATH_MAX:
        raise InvalidInput(
            field,
            N_(
                "is %(size)s bytes long as an absolute path; at most %(most)s bytes (PATH_MAX)",
                size=size,
                most=PATH_MAX - 1,
            ),
        )
    for name in normalized.split("/"):
        if len(name.encode("utf-8")) > NAME_MAX:
            raise InvalidInput(
                field,
                N_(
                    "the name %(name)r… is %(size)s bytes; a name may be at most %(most)s bytes "
                    "(NAME_MAX)",
                    name=name[:40],
                    size=len(name.encode("utf-8")),
                    most=NAME_MAX,
                ),
            )
    return normalized


def clean_mode(mode: str | None) -> str:
    """Permissions as the write script takes them: octal digits, at most 777 (None: 644)."""
    if mode is None or mode == "":
        return "644"
    if mode.isdigit() and all(ch in "01234567" for ch in mode):
        value = int(mode, 8)
        if value <= 0o777:
            return format(value, "o")
    raise InvalidInput(
        "mode", N_("must be an octal permission string such as '0644' (at most 0777)")
    )
