"""The HTTP and websocket server: uvicorn serving `config.asgi:application`.

uvicorn (on uvloop, with httptools) hands a request's body to the application as it arrives
and stops reading the socket while the application has not taken what came (about 64 KiB),
and a response's body waits
for the client to take what was sent before: an upload or a download of any size streams
through the server in a few buffers, never whole in memory nor on disk.

    python -m config.serving --host 127.0.0.1 --port 8000

serves the web process alone (the distributed mode); `manage.py serve` does the set-up first
and may run the worker in the same process.
"""

import argparse
import os
import sys

import uvicorn


def config(host: str, port: int, app: str = "config.asgi:application") -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http="httptools",
        # libuv's loop: an upload's pieces cross the event loop for a quarter less CPU than
        # on asyncio's own (bench/bench_files.py).
        loop="uvloop",
        ws="websockets-sansio",
        # The channels router serves no lifespan events; Boxyard starts what it needs itself.
        lifespan="off",
        # Forwarded headers are Django's to trust (SECURE_PROXY_SSL_HEADER,
        # USE_X_FORWARDED_HOST), as the operator configures them.
        proxy_headers=False,
        server_header=False,
        log_level=os.environ.get("BOXYARD_LOG_LEVEL", "info").lower(),
    )


def serve(host: str, port: int, app: str = "config.asgi:application") -> None:
    # A thread that waited on I/O (a query, a socket) waits again for the interpreter until
    # the thread holding it gives it up: by default after 5 ms, at every step of a request.
    # 1 ms keeps a quiet caller's request from queueing behind a busy one's (bench_tenants.py).
    sys.setswitchinterval(0.001)
    uvicorn.Server(config(host, port, app)).run()


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve Boxyard's web process.")
    parser.add_argument("--host", default=os.environ.get("BOXYARD_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("BOXYARD_PORT", "8000")))
    parser.add_argument("--app", default="config.asgi:application", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    serve(arguments.host, arguments.port, arguments.app)


if __name__ == "__main__":
    main()
