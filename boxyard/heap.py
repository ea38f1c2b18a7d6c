"""The server's heap: settled after start-up, and giving back what a burst of traffic used.

What start-up makes (Django, the apps, the URL conf, Celery, uvicorn, docker-py: some 150,000
objects) lives as long as the process, yet CPython's oldest generation walks all of it at
each full collection: 100 to 300 ms on a 2-core machine, during which no request is answered
and no dashboard hears of a change. Frozen, those objects are left out of every collection
(`gc.freeze`), and full collections only walk what was made since.

Large transfers (an exec's flood of output, a file of gigabytes) pass through the process in
pieces of up to a few hundred KiB. Freed, that memory would stay with the process under
glibc's defaults: each of the hundreds of request threads may get an arena of its own (up
to eight per core), and after a large block is freed glibc raises the size from which it
maps blocks on their own (up to 32 MiB), so later large buffers are carved from arenas that
fragment and are rarely returned. `limit_malloc` caps the arenas (the interpreter's lock
serialises most allocation anyway) and pins that size at 1 MiB, so a buffer of megabytes is
unmapped when freed, while a transfer's pieces are carved from the arenas and their memory
reused piece after piece (mapped on their own, every piece would cost a fresh mapping
faulted in page by page: a third of the server's time in an upload); a few MiB of free
memory may stay at the top of an arena for the next piece before it is given back;
`start_trimming` watches the resident size and, when it has grown, collects the garbage a
burst left in reference cycles and hands freed pages back (`malloc_trim`). Both do nothing
where the C library is not glibc; glibc's own `MALLOC_*` environment variables, when set,
win over the values here.
"""

import ctypes
import functools
import gc
import logging
import os
import threading

log = logging.getLogger(__name__)

# mallopt(3) parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

# Arenas for all threads: allocation mostly happens under the interpreter's lock, so more
# arenas buy little speed and each keeps its own free memory.
ARENA_MAX = 2
# Blocks from this size up are mapped on their own and unmapped when freed (kept fixed
# instead of rising after each large free). A transfer's pieces are smaller.
MMAP_THRESHOLD = 1024 * 1024
# Free memory at the top of an arena beyond this goes back to the system at once: room for
# the pieces of the transfers under way, so that each is not given back and faulted in again.
TRIM_THRESHOLD = 8 * 1024 * 1024
# The resident size is looked at this often; more than TRIM_AFTER_GROWTH above the lowest
# seen, the garbage is collected and free pages are handed back (see `watch`).
TRIM_EVERY_SECONDS = 5.0
TRIM_AFTER_GROWTH = 16 * 1024 * 1024
MAX_SKIPPED_TURNS = 5

_POLICY = (
    ("MALLOC_ARENA_MAX", "arena_max", _M_ARENA_MAX, ARENA_MAX),
    ("MALLOC_MMAP_THRESHOLD_", "mmap_threshold", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    ("MALLOC_TRIM_THRESHOLD_", "trim_threshold", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
)

_trimmer: threading.Thread | None = None
_trimmer_lock = threading.Lock()


def settle() -> None:
    """Free start-up's garbage, then freeze what is left. Call it once the process has loaded
    what it serves with; calling it again later freezes what was made meanwhile."""
    gc.collect()
    gc.freeze()


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The process's C library if it is glibc (which has mallopt's arenas and malloc_trim)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not all(hasattr(libc, name) for name in ("gnu_get_libc_version", "mallopt", "malloc_trim")):
        return None
    return libc


def limit_malloc() -> dict[str, int]:
    """Set glibc's allocation policy (see the module's docstring); returns what was set.
    Call it as early as possible: arenas made before it stay."""
    libc = _glibc()
    if libc is None:
        return {}
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    applied: dict[str, int] = {}
    for variable, tunable, parameter, value in _POLICY:
        if variable in os.environ or f"glibc.malloc.{tunable}" in tunables:
            continue  # the operator chose
        if libc.mallopt(ctypes.c_int(parameter), ctypes.c_int(value)) == 1:
            applied[variable] = value
    return applied


def resident_bytes() -> int:
    """This process's resident set size."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def give_back() -> bool:
    """Collect garbage in reference cycles, then hand free pages back to the system; whether
    the C library could (glibc only)."""
    gc.collect()
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(ctypes.c_size_t(0))
    return True


def watch(every: float, growth: int, stop: threading.Event | None = None) -> None:
    """Every `every` seconds, give memory back if the resident size is more than `growth`
    bytes above the lowest seen (what the process needs at rest). A give-back that frees
    little (the memory is in use) is tried again after a pause that doubles each time, up
    to MAX_SKIPPED_TURNS turns, rather than at every turn for nothing."""
    stop = stop or threading.Event()
    floor = resident_bytes()
    futile, skip = 0, 0
    while not stop.wait(every):
        size = resident_bytes()
        floor = min(floor, size)
        if size - floor <= growth:
            futile, skip = 0, 0
            continue
        if skip:
            skip -= 1
            continue
        try:
            give_back()
        except Exception:
            log.exception("giving memory back failed")
        if size - resident_bytes() >= growth // 2:
            futile = 0
        else:
            futile += 1
            skip = min(2**futile - 1, MAX_SKIPPED_TURNS)


def start_trimming() -> threading.Thread | None:
    """Start (once per process) the thread that gives memory back after a burst (`watch`
    with TRIM_EVERY_SECONDS and TRIM_AFTER_GROWTH); None where the C library is not glibc."""
    global _trimmer
    if _glibc() is None:
        return None
    with _trimmer_lock:
        if _trimmer is None or not _trimmer.is_alive():
            _trimmer = threading.Thread(
                target=watch,
                args=(TRIM_EVERY_SECONDS, TRIM_AFTER_GROWTH),
                name="heap-trim",
                daemon=True,
            )
            _trimmer.start()
        return _trimmer
