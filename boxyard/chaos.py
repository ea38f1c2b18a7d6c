"""Crash points for the chaos tests: the process dies at a named step of an operation.

`BOXYARD_CRASH_AT=<point>` in a process's environment makes that process exit at once, as
a SIGKILL would leave it, when it reaches the point: no clean-up, no rollback beyond what
the database does for an open transaction. The reconciler must then bring rows and
containers back together. Without the variable a point costs one string comparison.
"""

import os

_CRASH_AT = os.environ.get("BOXYARD_CRASH_AT", "")

# Every point, in the order an operation reaches them (the tests walk this list).
CREATE_POINTS = ("create:row", "create:volume", "create:container", "create:started")
STOP_POINTS = ("stop:stopping", "stop:container-removed", "stop:volume-removed")


def point(name: str) -> None:
    if _CRASH_AT and name == _CRASH_AT:
        os._exit(137)
