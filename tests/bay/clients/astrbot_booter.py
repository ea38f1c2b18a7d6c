"""Run in AstrBot's own virtualenv (`bin/client-venv astrbot`), not in Boxyard's: AstrBot's
`shipyard_neo` booter, unchanged, driven as AstrBot drives it for a chat, with the sandbox
settings given as JSON (AstrBot's `provider_settings.sandbox`). Prints what it saw as JSON."""

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from astrbot.core.computer.booters.shipyard_neo import ShipyardNeoBooter


async def main(settings: dict[str, object]) -> dict[str, object]:
    assert settings["booter"] == "shipyard_neo", settings
    # As AstrBot's computer client builds it from those settings.
    booter = ShipyardNeoBooter(
        endpoint_url=str(settings["shipyard_neo_endpoint"]),
        access_token=str(settings["shipyard_neo_access_token"]),
        profile=str(settings.get("shipyard_neo_profile", "python-default")),
        ttl=int(settings.get("shipyard_neo_ttl", 3600)),  # type: ignore[call-overload]
    )
    seen: dict[str, object] = {}
    await booter.boot("astrbot-chat-1")
    seen["sandbox_id"] = booter.sandbox.id
    seen["capabilities"] = list(booter.capabilities or ())
    seen["available"] = await booter.available()
    seen["shell"] = await booter.shell.exec("echo from astrbot; pwd")
    seen["python"] = await booter.python.exec("print(6 * 7)")
    await booter.python.exec("x = 41")
    seen["kept"] = await booter.python.exec("x + 1")
    seen["chart"] = await booter.python.exec(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"
    )
    seen["write"] = await booter.fs.write_file("astrbot/notes.md", "# notes\nhello\n")
    seen["read"] = await booter.fs.read_file("astrbot/notes.md")
    seen["edit"] = await booter.fs.edit_file("astrbot/notes.md", "hello", "hello, Boxyard")
    seen["listed"] = await booter.fs.list_dir("astrbot")
    with tempfile.TemporaryDirectory() as folder:
        local = Path(folder) / "data.bin"
        local.write_bytes(bytes(range(256)) * 16)
        await booter.upload_file(str(local), "/uploads/data.bin")
        back = Path(folder) / "back.bin"
        await booter.download_file("/uploads/data.bin", str(back))
        seen["round_trip"] = back.read_bytes() == local.read_bytes()
    seen["deleted"] = await booter.fs.delete_file("astrbot/notes.md")
    await booter.shutdown(delete_sandbox=True)
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1]))), default=str))
