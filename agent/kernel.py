"""A code context's driver, run by boxyard-agent as the sandbox user (`python3 -c`).

It starts one Jupyter kernel (ipykernel) on this sandbox's own loopback and speaks to the
agent in JSON lines: a request on stdin, {"code": ..., "env": {...}}, is executed, and each
thing the kernel says comes out on fd 3 as it comes (fds 1 and 2 are /dev/null: nothing
else can write into the answers): {"type": "stdout"|"stderr", "text"},
{"type": "result", "data": {mime: value}, "main": bool}, {"type": "error", "name", "value",
"traceback"}, then {"type": "end", "status", "count"}. First it says {"type": "ready",
"pid": the kernel's pid} (the agent interrupts the kernel with SIGINT there), or
{"type": "failed", "error"} and exits. When the kernel dies it says so and exits: the agent
starts a new one for the next request.
"""

import json
import os
import queue
import shutil
import sys

OUT = os.fdopen(3, "w")
CHART_SETUP = r"""
def __boxyard_setup():
    import matplotlib
    from IPython import get_ipython
    from matplotlib.figure import Figure

    def chart(figure):
        try:
            return __boxyard_chart(figure)
        except Exception:
            return None

    formatter = get_ipython().display_formatter
    from IPython.core.formatters import JSONFormatter

    class ChartFormatter(JSONFormatter):
        format_type = "application/vnd.boxyard.chart+json"

    formatter.formatters[ChartFormatter.format_type] = ChartFormatter(parent=formatter)
    formatter.formatters[ChartFormatter.format_type].for_type(Figure, chart)
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
    lines = [line for line in axis.get_lines() if not line.get_label().startswith("_child")]
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
                "label": line.get_label(),
                "points": [[plain(x), plain(y)] for x, y in zip(xs, ys)],
            })
        return {"type": "line", **base, "elements": elements}
    if axis.collections:
        elements = []
        for collection in axis.collections:
            offsets = collection.get_offsets()
            elements.append({
                "label": collection.get_label(),
                "points": [[plain(x), plain(y)] for x, y in offsets],
            })
        return {"type": "scatter", **base, "elements": elements}
    return None


__boxyard_setup()
del __boxyard_setup
"""


def say(message):
    OUT.write(json.dumps(message, default=str) + "\n")
    OUT.flush()


def start():
    # The kernel's own files (connection file, IPython's profile, matplotlib's cache) stay in
    # /tmp, never in the user's workspace.
    scratch = os.environ.setdefault("JUPYTER_RUNTIME_DIR", "/tmp/.boxyard-kernels")
    os.makedirs(scratch, exist_ok=True)
    os.environ.setdefault("IPYTHONDIR", os.path.join(scratch, "ipython"))
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    cache = os.environ.setdefault("MPLCONFIGDIR", os.path.join(scratch, "matplotlib"))
    built = os.environ.pop("BOXYARD_MATPLOTLIB_CACHE", "")
    if built and os.path.isdir(built) and not os.path.isdir(cache):
        shutil.copytree(built, cache)
    from jupyter_client.manager import KernelManager

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(
        extra_arguments=[
            "--HistoryManager.enabled=False",
            "--InteractiveShell.colors=NoColor",
            "--InlineBackend.rc={}",
            "--InlineBackend.print_figure_kwargs={'bbox_inches': None}",
            "--IPKernelApp.matplotlib=inline",
        ],
        cwd=os.getcwd(),
    )
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    quiet(client, manager, CHART_SETUP)
    pid = getattr(manager.provisioner, "pid", None) or manager.provisioner.process.pid
    return manager, client, pid


def quiet(client, manager, code):
    """Execute code that says nothing, and wait for its end."""
    reply_id = client.execute(code, silent=True, store_history=False)
    while True:
        try:
            reply = client.get_shell_msg(timeout=1)
        except queue.Empty:
            if not manager.is_alive():
                raise RuntimeError("the kernel ended") from None
            continue
        if reply["parent_header"].get("msg_id") == reply_id:
            return reply["content"]


def run(client, manager, code, env):
    restore = None
    if env:
        restore = quiet(
            client,
            manager,
            "import os as __o, json as __j\n"
            f"__boxyard_env = {{k: __o.environ.get(k) for k in __j.loads({json.dumps(json.dumps(env))})}}\n"
            f"__o.environ.update(__j.loads({json.dumps(json.dumps(env))}))\n",
        )
    msg_id = client.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
    status, count = "ok", None
    while True:
        try:
            msg = client.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            if not manager.is_alive():
                say({"type": "error", "name": "KernelDied", "value": died(), "traceback": ""})
                say({"type": "end", "status": "died", "count": count})
                return False
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
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
            manager,
            "for __k, __v in __boxyard_env.items():\n"
            "    if __v is None: __o.environ.pop(__k, None)\n"
            "    else: __o.environ[__k] = __v\n"
            "del __boxyard_env, __k, __v\n",
        )
    say({"type": "end", "status": status, "count": count})
    return True


def died():
    return "The kernel ended (out of memory, or killed); its state is lost: the next run starts a new one."


def main():
    try:
        manager, client, pid = start()
    except Exception as error:  # whatever it is, the agent says it
        say({"type": "failed", "error": f"{type(error).__name__}: {error}"})
        return 1
    say({"type": "ready", "pid": pid})
    for line in sys.stdin:
        request = json.loads(line)
        if not run(client, manager, request.get("code", ""), request.get("env") or {}):
            return 1
    manager.shutdown_kernel(now=True)
    return 0


sys.exit(main())
