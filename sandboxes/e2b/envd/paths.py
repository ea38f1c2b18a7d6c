"""Where the E2B SDKs and their users expect things, and where they are in a Boxyard sandbox.

The SDKs run as the user `user` in `/home/user`. A Boxyard sandbox's persistent workspace is
`/workspace`, and its containers mount the same workspace at `/home/user` too (see
`services/specs.py`), so a command started there prints `/home/user` as its cwd. The file
services speak of `/workspace`: a path the SDK sends (absolute under `/home/user` or
`/workspace`, or relative to `/home/user`) becomes the workspace's, and a path the services
answer goes back under `/home/user`.
"""

import posixpath

from sandboxes.scripts import WORKSPACE

HOME = "/home/user"
USER = "user"


def to_workspace(path: str) -> str:
    """The workspace's path for a path the SDK sends (anything outside both stays as it is,
    for the file services to refuse by name)."""
    absolute = posixpath.normpath(posixpath.join(HOME, path)) if path else HOME
    if absolute == HOME or absolute.startswith(HOME + "/"):
        return WORKSPACE + absolute[len(HOME) :]
    return absolute


def to_home(path: str) -> str:
    """The path the SDK is shown for a workspace's path."""
    if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
        return HOME + path[len(WORKSPACE) :]
    return path


def cwd_of(path: str | None) -> str:
    """A command's cwd as the SDK names it (its default: home)."""
    return posixpath.normpath(posixpath.join(HOME, path)) if path else HOME
