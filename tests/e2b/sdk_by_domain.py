"""What a bot does with E2B's SDK given only E2B_DOMAIN and E2B_API_KEY (run in a process of
its own, so that the SDK reads its settings and the TLS roots as a fresh bot would): a chat's
sandbox, a command, a file written and read back, the same sandbox from the async SDK, then
killed. Prints what it saw as JSON."""

import asyncio
import json
import sys

from e2b import AsyncSandbox, Sandbox


async def again(sandbox_id: str) -> dict[str, str]:
    sandbox = await AsyncSandbox.connect(sandbox_id)
    ran = await sandbox.commands.run("cat notes.txt")
    return {"async_stdout": ran.stdout, "async_host": sandbox.get_host(49983)}


def main(metadata: dict[str, str]) -> dict[str, object]:
    sandbox = Sandbox.create(metadata=metadata)
    ran = sandbox.commands.run("echo hello from $(pwd)")
    sandbox.files.write("notes.txt", "kept by name")
    seen: dict[str, object] = {
        "sandbox_id": sandbox.sandbox_id,
        "host": sandbox.get_host(49983),
        "stdout": ran.stdout,
        "read": sandbox.files.read("notes.txt"),
        "listed": [found.sandbox_id for found in Sandbox.list().next_items()],
        **asyncio.run(again(sandbox.sandbox_id)),
    }
    seen["killed"] = sandbox.kill()
    return seen


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
