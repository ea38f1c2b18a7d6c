"""A code context's driver, run by boxyard-agent as the sandbox user (`python3 -c`).

It starts one Jupyter kernel (ipykernel) on this sandbox's own loopback and speaks to the
agent in JSON lines: a request on stdin, {"code": ..., "env": {...}}, is executed, and each
thing the kernel says comes out on fd 3 as it comes (fds 1 and 2 are /dev/null: nothing
else can write into the answers): {"type": "stdout"|"stderr", "text"},
{"type": "result", "data": {mime: value}, "main": bool}, {"type": "error", "name", "value",
"traceback"}, then {"type": "end", "status", "count"}. First it says {"type": "ready",
"pid": this driver's, "signal": "USR1"} (the agent asks for an interrupt so), or
{"type": "failed", "error"} and exits. When the kernel dies it says so and exits: the agent
starts a new one for the next request.
"""

import json
import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

OUT = os.fdopen(3, "w")
CHART_SETUP = r"""
def __boxyard_setup():
    from IPython import get_ipython
    from IPython.core.formatters import JSONFormatter

    def chart(figure):
        try:
            return __boxyard_chart(figure)
        except Exception:
            return None

    # A matplotlib figure's data, found by its class's name: matplotlib is imported by the
    # code that draws, not at the kernel's start, and its inline backend clears what is
    # registered for figures when it starts.
    class ChartFormatter(JSONFormatter):
        format_type = "application/vnd.boxyard.chart+json"

        def __call__(self, obj):
            kind = type(obj)
            if kind.__name__ == "Figure" and kind.__module__ == "matplotlib.figure":
                return chart(obj)
            return None

    shell = get_ipython()
    # Figures as matplotlib draws them: its own size and colours (the inline backend's
    # defaults would crop them and change their dpi); read when pyplot is first imported.
    shell.config.InlineBackend.rc = {}
    shell.config.InlineBackend.print_figure_kwargs = {"bbox_inches": None}
    formatter = shell.display_formatter
    formatter.formatters[ChartFormatter.format_type] = ChartFormatter(parent=formatter)
    if ChartFormatter.format_type not in formatter.active_types:
        formatter.active_types.append(ChartFormatter.format_type)


def __boxyard_chart(figure):
    import matplotlib.dates
    import numpy

    axes = [axis for axis in figure.get_axes() if axis.has_data()]
    if len(axes) != 1:
        return None
    axis = axes[0]

    def plain(value):
        if isinstance(value, numpy.generic):
            value = value.item()
        if isinstance(value, float) and value != value:
            return None
        return value if isinstance(value, (int, float, str)) or value is None else str(value)

    def labels(ticks):
        return [tick.get_text() for tick in ticks]

    base = {
        "title": axis.get_title() or None,
        "x_label": axis.get_xlabel() or None,
        "y_label": axis.get_ylabel() or None,
    }
    lines = axis.get_lines()

    def label(artist):
        text = artist.get_label()
        return "" if text.startswith("_") else text  # matplotlib's own names for unlabelled

    if axis.patches and not lines:
        bars = [patch for patch in axis.patches if patch.get_width() is not None]
        texts = labels(axis.get_xticklabels())
        elements = []
        for container in axis.containers:
            group = container.get_label() or ""
            for index, bar in enumerate(container):
                label = texts[index] if index < len(texts) else str(index)
                elements.append({"label": label, "group": group, "value": plain(bar.get_height())})
        if elements or bars:
            return {"type": "bar", **base, "elements": elements}
    if lines:
        elements = []
        for line in lines:
            xs, ys = line.get_xdata(), line.get_ydata()
            elements.append({
                "label": label(line),
                "points": [[plain(x), plain(y)] for x, y in zip(xs, ys)],
            })
        return {"type": "line", **base, "elements": elements}
    if axis.collections:
        elements = []
        for collection in axis.collections:
            offsets = collection.get_offsets()
            elements.append({
                "label": label(collection),
                "points": [[plain(x), plain(y)] for x, y in offsets],
            })
        return {"type": "scatter", **base, "elements": elements}
    return None


__boxyard_setup()
del __boxyard_setup
"""


# ipykernel, without its debugger (a debugger's import costs a third of a kernel's start, and
# nobody attaches one to a sandbox's kernel).
LAUNCH = (
    "import sys; sys.modules['debugpy'] = None\n"
    "from ipykernel.kernelapp import launch_new_instance\n"
    "launch_new_instance()"
)


# The agent asks for a run's interrupt with SIGUSR1 (to this driver, which knows when the
# kernel has begun to run the code: a SIGINT before that would be lost).
ASKED = threading.Event()


def say(message):
    OUT.write(json.dumps(message, default=str) + "\n")
    OUT.flush()


def start():
    # The kernel's own files (connection file, IPython's profile, matplotlib's cache) stay in
    # /tmp, never in the user's workspace.
    scratch = os.environ.setdefault("JUPYTER_RUNTIME_DIR", "/tmp/.boxyard-kernels")
    os.makedirs(scratch, exist_ok=True)
    os.environ.setdefault("IPYTHONDIR", os.path.join(scratch, "ipython"))
    # Figures shown inline (as PNG results) from the moment the code imports pyplot.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    cache = os.environ.setdefault("MPLCONFIGDIR", os.path.join(scratch, "matplotlib"))
    built = os.environ.pop("BOXYARD_MATPLOTLIB_CACHE", "")
    if built and os.path.isdir(built) and not os.path.isdir(cache):
        shutil.copytree(built, cache)
    # The kernel is launched first, and the client's modules imported while it starts.
    info = connection(scratch)
    kernel = subprocess.Popen(
        [
            sys.executable, "-c", LAUNCH, "-f", info["file"],
            "--HistoryManager.enabled=False",
            "--InteractiveShell.colors=NoColor",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    from jupyter_client.blocking import BlockingKernelClient

    client = BlockingKernelClient()
    client.load_connection_info(info["ports"])
    client.start_channels(hb=False)  # the kernel's process says whether it lives
    ready(client, kernel)
    quiet(client, kernel, CHART_SETUP)
    return kernel, client, kernel.pid


def ready(client, kernel, seconds=60):
    """Wait for the kernel to answer on its shell channel (it is still importing at first)
    and for its broadcasts to reach us: a subscription misses what was published before it
    was connected, so the kernel is asked until the status of an answer comes on iopub."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        asked = client.kernel_info()
        answered = time.monotonic() + 0.1
        heard = False
        while time.monotonic() < answered and not heard:
            try:
                said = client.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                if kernel.poll() is not None:
                    raise RuntimeError(
                        f"the kernel ended as it started (exit {kernel.returncode})"
                    ) from None
                continue
            heard = said["parent_header"].get("msg_id") == asked
        if heard:
            while True:  # its answer, and those to the earlier asks
                try:
                    if client.get_shell_msg(timeout=1)["parent_header"].get("msg_id") == asked:
                        return
                except queue.Empty:
                    break
    raise RuntimeError(f"the kernel did not answer within {seconds} s")


def connection(scratch):
    """A connection file for a kernel on this sandbox's loopback: free ports, a new key."""
    ports = {}
    sockets = []
    for name in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
        ports[name] = sock.getsockname()[1]
    for sock in sockets:
        sock.close()
    ports.update(
        ip="127.0.0.1", key=secrets.token_hex(32), transport="tcp",
        signature_scheme="hmac-sha256", kernel_name="python3",
    )  # fmt: skip
    path = os.path.join(scratch, f"kernel-{os.getpid()}.json")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
        json.dump(ports, file)
    return {"file": path, "ports": ports}


def quiet(client, kernel, code):
    """Execute code that says nothing, and wait for its end."""
    reply_id = client.execute(code, silent=True, store_history=False)
    while True:
        try:
            reply = client.get_shell_msg(timeout=1)
        except queue.Empty:
            if kernel.poll() is not None:
                raise RuntimeError("the kernel ended") from None
            continue
        if reply["parent_header"].get("msg_id") == reply_id:
            return reply["content"]


def run(client, kernel, code, env):
    restore = None
    if env:
        restore = quiet(
            client,
            kernel,
            "import os as __o, json as __j\n"
            f"__boxyard_env = {{k: __o.environ.get(k) for k in __j.loads({json.dumps(json.dumps(env))})}}\n"
            f"__o.environ.update(__j.loads({json.dumps(json.dumps(env))}))\n",
        )
    msg_id = client.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
    status, count = "ok", None
    executing, interrupted = False, 0.0
    while True:
        if ASKED.is_set() and executing and time.monotonic() - interrupted > 1:
            # The kernel takes SIGINT while it runs code (at other times it ignores it):
            # sent once the run has begun, again each second it goes on.
            os.kill(kernel.pid, signal.SIGINT)
            interrupted = time.monotonic()
        try:
            msg = client.get_iopub_msg(timeout=0.1 if ASKED.is_set() else 0.5)
        except queue.Empty:
            if kernel.poll() is not None:
                say({"type": "error", "name": "KernelDied", "value": died(), "traceback": ""})
                say({"type": "end", "status": "died", "count": count})
                return False
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        executing = executing or kind == "execute_input"
        if kind == "stream":
            say({"type": content["name"], "text": content["text"]})
        elif kind in ("display_data", "execute_result", "update_display_data"):
            say(
                {
                    "type": "result",
                    "data": content.get("data", {}),
                    "main": kind == "execute_result",
                }
            )
        elif kind == "error":
            status = "error"
            say(
                {
                    "type": "error",
                    "name": content.get("ename", ""),
                    "value": content.get("evalue", ""),
                    "traceback": "\n".join(content.get("traceback", [])),
                }
            )
        elif kind == "execute_input":
            count = content.get("execution_count")
        elif kind == "status" and content.get("execution_state") == "idle":
            break
    if restore is not None:
        quiet(
            client,
            kernel,
            "for __k, __v in __boxyard_env.items():\n"
            "    if __v is None: __o.environ.pop(__k, None)\n"
            "    else: __o.environ[__k] = __v\n"
            "del __boxyard_env, __k, __v\n",
        )
    ASKED.clear()  # an interrupt asked during this run ends with it
    say({"type": "end", "status": status, "count": count})
    return True


def died():
    return "The kernel ended (out of memory, or killed); its state is lost: the next run starts a new one."


def main():
    signal.signal(signal.SIGUSR1, lambda *_: ASKED.set())
    try:
        kernel, client, _pid = start()
    except Exception as error:  # whatever it is, the agent says it
        say({"type": "failed", "error": f"{type(error).__name__}: {error}"})
        return 1
    say({"type": "ready", "pid": os.getpid(), "signal": "USR1"})
    for line in sys.stdin:
        request = json.loads(line)
        if not run(client, kernel, request.get("code", ""), request.get("env") or {}):
            return 1
    kernel.kill()
    return 0


sys.exit(main())
