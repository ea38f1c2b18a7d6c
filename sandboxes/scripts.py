"""POSIX shell programs Boxyard runs inside sandboxes.

They need only `sh` and the usual tools of coreutils or busybox (realpath, stat, find,
head, mkdir, mv, rm, setsid when present), so they work in Boxyard's images and in any
ordinary Linux image. They run as the sandbox user, never as root: whatever a planted
symlink or a race could make them touch, the sandbox's own code could touch already.

Exit codes of 200 and above are the scripts' own verdicts, mapped to errors by the
services (`services/files/inside.py`); a command's own exit code passes through the exec wrapper as is.
"""

WORKSPACE = "/workspace"

# Verdicts shared by the file scripts.
NOT_FOUND = 202
OUTSIDE = 203
WRITE_FAILED = 204
NOT_REGULAR = 205
EXISTS = 206
IS_DIRECTORY = 207
NOT_DIRECTORY = 208
NOT_EMPTY = 209
BAD_CWD = 210
INCOMPLETE = 211
CHANGED = 212
REFUSED = 213  # an archive's entry refused (`boxyard-agent extract`)

_INSIDE = """
inside() { case "$1" in /workspace|/workspace/*) return 0;; *) return 1;; esac; }
"""

# argv: timeout-seconds cwd mode(argv|shell) command...
# The command runs in its own session so that a timeout kills its whole process tree; the
# watchdog lives in the sandbox, so the limit holds even if Boxyard's process dies.
EXEC = r"""
t=$1; cwd=$2; mode=$3; shift 3
cd "$cwd" 2>/dev/null || { printf 'boxyard: cwd %s is not a directory\n' "$cwd" >&2; exit 210; }
if [ "$mode" = shell ]; then
  if command -v bash >/dev/null 2>&1; then set -- bash -c "$1"; else set -- sh -c "$1"; fi
fi
S=; command -v setsid >/dev/null 2>&1 && S=setsid
$S "$@" &
pid=$!
w=
if [ "$t" -gt 0 ]; then
  $S sh -c 'sleep "$1" & s=$!; trap "kill $s 2>/dev/null; exit 0" TERM; wait $s
            kill -KILL -"$2" 2>/dev/null || kill -KILL "$2" 2>/dev/null' \
     watchdog "$t" "$pid" </dev/null >/dev/null 2>&1 &
  w=$!
fi
wait "$pid" 2>/dev/null; rc=$?  # 2>/dev/null: no "Killed" job notice in its stderr
[ -n "$w" ] && { kill -KILL -"$w" 2>/dev/null || kill "$w" 2>/dev/null; }
exit $rc
"""

# argv: path mode(octal) overwrite(0|1) size; stdin: the contents, `size` bytes.
# Parents are created; the file is written beside its target and renamed over it (linked to
# it without overwrite, which fails if a file got there meanwhile), so a reader never sees
# half a file and a symlink at the target is replaced, not followed. Input that ends before
# `size` bytes (a client that went away) leaves nothing behind.
WRITE = (
    _INSIDE
    + r"""
p=$1; mode=$2; ow=$3; n=$4
dir=${p%/*}; name=${p##*/}
mkdir -p "$dir" 2>/dev/null
if ! real=$(realpath "$dir" 2>/dev/null); then
  d=$dir; while [ ! -e "$d" ] && [ -n "$d" ]; do d=${d%/*}; done
  [ -z "$d" ] || [ -d "$d" ] || exit 208  # a file where a parent directory should be
  echo "boxyard: cannot create $dir" >&2; exit 204
fi
inside "$real" || exit 203
[ -d "$real" ] || exit 208
t="$real/$name"
if [ -e "$t" ] || [ -L "$t" ]; then
  [ -d "$t" ] && [ ! -L "$t" ] && exit 207
  [ "$ow" = 1 ] || exit 206
fi
# Relative names from inside the directory: the temporary file's absolute path may be longer
# than the kernel's PATH_MAX even when the target's is not.
cd "$real" || exit 204
tmp=".boxyard-write.$$"
# stdin never carries more than `size` bytes (Boxyard sends no more); fewer is an input that
# ended early.
if ! cat > "$tmp"; then rm -f "$tmp"; exit 204; fi
[ "$(stat -c %s "$tmp")" = "$n" ] || { rm -f "$tmp"; exit 211; }
chmod "$mode" "$tmp" || { rm -f "$tmp"; exit 204; }
if [ "$ow" = 1 ]; then
  mv -f "$tmp" "$name" || { rm -f "$tmp"; exit 204; }
else
  if ! ln "$tmp" "$name" 2>/dev/null; then
    rm -f "$tmp"
    if [ -e "$name" ] || [ -L "$name" ]; then exit 206; fi
    exit 204
  fi
  rm -f "$tmp"
fi
"""
)

# argv: path start length(-1: to the end) [identity]. stdout: the file's identity on one
# line ("size mtime inode"), then `length` bytes from `start`. Given an identity, a file that
# no longer has it is not read (it was replaced or changed since).
READ = (
    _INSIDE
    + r"""
p=$1; start=$2; n=$3
[ -e "$p" ] || exit 202
real=$(realpath "$p" 2>/dev/null) || exit 202
inside "$real" || exit 203
[ -d "$real" ] && exit 207
[ -f "$real" ] || exit 205
id=$(stat -c '%s %Y %i' "$real") || exit 202
[ -z "${4:-}" ] || [ "$4" = "$id" ] || exit 212
echo "$id"
[ "$n" = 0 ] && exit 0
if [ "$start" = 0 ] && [ "$n" -lt 0 ]; then exec cat "$real"; fi
if [ "$n" -lt 0 ]; then exec dd if="$real" bs=1M iflag=skip_bytes skip="$start" status=none; fi
exec dd if="$real" bs=1M iflag=skip_bytes,count_bytes skip="$start" count="$n" status=none
"""
)

# argv: path recursive(0|1). stdout: per entry, "type|size|mode|mtime|" and a line break,
# then the path and a NUL: a name may hold line breaks and "|", never a NUL. (Sandboxes with
# the agent list with `boxyard-agent list`, which writes JSON; this is for those without.)
LIST = (
    _INSIDE
    + r"""
p=$1; r=$2
[ -e "$p" ] || exit 202
real=$(realpath "$p" 2>/dev/null) || exit 202
inside "$real" || exit 203
[ -d "$real" ] || exit 208
if [ "$r" = 1 ]; then set --; else set -- -maxdepth 1; fi
exec find "$real" -mindepth 1 "$@" -exec sh -c \
  'for f do stat -c "%F|%s|%a|%Y|" -- "$f" && printf "%s\0" "$f"; done' boxyard-stat {} +
"""
)

# argv: path recursive(0|1). A symlink is removed itself, never what it points to.
DELETE = (
    _INSIDE
    + r"""
p=$1; r=$2
[ -e "$p" ] || [ -L "$p" ] || exit 202
dir=$(realpath "${p%/*}" 2>/dev/null) || exit 202
inside "$dir" || exit 203
t="$dir/${p##*/}"
[ "$t" = /workspace ] && exit 203
if [ -d "$t" ] && [ ! -L "$t" ]; then
  if [ "$r" = 1 ]; then rm -rf "$t" || exit 204; else rmdir "$t" 2>/dev/null || exit 209; fi
else
  rm -f "$t" || exit 204
fi
"""
)

# argv: path. Exits EXISTS when something is there already; the deepest existing ancestor,
# symlinks resolved, must be inside the workspace.
MKDIR = (
    _INSIDE
    + r"""
p=$1
{ [ -e "$p" ] || [ -L "$p" ]; } && exit 206
a=$p; while [ ! -e "$a" ] && [ ! -L "$a" ]; do a=${a%/*}; done
r=$(realpath "$a" 2>/dev/null) || exit 202
inside "$r" || exit 203
[ -d "$r" ] || exit 208
mkdir -p "$p" || exit 204
"""
)

# argv: source destination. The source's directory and the destination's nearest existing
# ancestor, symlinks resolved, must be inside the workspace; the destination's parents are
# made; a symlink at the source is moved, not followed.
MOVE = (
    _INSIDE
    + r"""
s=$1; d=$2
[ -e "$s" ] || [ -L "$s" ] || exit 202
sd=$(realpath "${s%/*}" 2>/dev/null) || exit 202
inside "$sd" || exit 203
t="$sd/${s##*/}"
[ "$t" = /workspace ] && exit 203
a=${d%/*}; while [ ! -e "$a" ] && [ ! -L "$a" ]; do a=${a%/*}; done
r=$(realpath "$a" 2>/dev/null) || exit 202
inside "$r" || exit 203
mkdir -p "${d%/*}" || exit 204
dd=$(realpath "${d%/*}" 2>/dev/null) || exit 202
inside "$dd" || exit 203
[ "$dd/${d##*/}" = /workspace ] && exit 203
mv -f "$t" "$dd/${d##*/}" || exit 204
"""
)


def sh(script: str, name: str, *args: str) -> list[str]:
    """argv running `script` with `sh -c`; `name` becomes $0 (shown in ps and errors)."""
    return ["sh", "-c", script, name, *args]
