"""The code interpreter through the Python client, blocking and asyncio: against a served
Boxyard with real kernels, and what it sends and reads against a mock transport."""

import asyncio
import json
from typing import Any

import httpx
import pytest

from boxyard_client import (
    AsyncBoxyardClient,
    BadRequest,
    BoxyardClient,
    CodeContext,
    CodeResult,
    NotFound,
)
from tests.api.test_client import EXEC_ID, SANDBOX_ID, Recorder, call_sync, error
from tests.code.conftest import Coder
from tests.code.test_code_api import png_size

CHART = (
    "import matplotlib.pyplot as plt\n"
    "fig = plt.figure(figsize=(4, 3), dpi=100)\n"
    "plt.plot([1, 2, 3], [4, 5, 6])\nplt.title('Sales');"
)


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_the_blocking_client_runs_code_streams_it_and_manages_contexts(coder: Coder) -> None:
    with BoxyardClient(coder.url, coder.token) as boxyard:
        sandbox = boxyard.open(coder.pipeline.slug, {"launcher_type": "group", "launcher_id": "1"})
        first = boxyard.run_code(sandbox.sandbox_id, "x = 20\nprint('hi')")
        assert isinstance(first, CodeResult) and first.ok and first.stdout == "hi\n"
        assert first.text is None and first.context_id == "default" and first.exec_id
        second = boxyard.run_code(sandbox.sandbox_id, "x + 1")
        assert (second.text, second.execution_count, second.status) == ("21", 2, "completed")
        chart = boxyard.run_code(sandbox.sandbox_id, CHART)
        [figure] = chart.displayed
        assert png_size(figure["png"]) == (400, 300) and chart.results[-1]["type"] == "end"

        failed = boxyard.run_code(sandbox.sandbox_id, "raise ValueError('boom')")
        assert not failed.ok and failed.error is not None
        assert (failed.error["name"], failed.error["value"]) == ("ValueError", "boom")
        stuck = boxyard.run_code(sandbox.sandbox_id, "while True:\n    pass", timeout_seconds=2)
        assert stuck.status == "timed_out"
        env = boxyard.run_code(
            sandbox.sandbox_id, "import os\nos.environ['WHO']", env={"WHO": "bot"}
        )
        assert env.text == "'bot'"
        js = boxyard.run_code(sandbox.sandbox_id, "let n = 20; n + 1", language="javascript")
        assert (js.text, js.language, js.context_id) == ("21", "javascript", "default-javascript")

        streamed = list(
            boxyard.run_code_stream(
                sandbox.sandbox_id, "import time\nprint('a')\ntime.sleep(0.3)\nprint('b')\n6 * 7"
            )
        )
        assert [item["type"] for item in streamed] == ["stdout", "stdout", "result", "end"]
        assert streamed[2]["text"] == "42" and streamed[-1]["status"] == "ok"

        made = boxyard.create_code_context(sandbox.sandbox_id, language="python")
        assert isinstance(made, CodeContext) and made.language == "python"
        boxyard.run_code(sandbox.sandbox_id, "y = 'mine'", context_id=made.id)
        assert boxyard.run_code(sandbox.sandbox_id, "y", context_id=made.id).text == "'mine'"
        listed = boxyard.code_contexts(sandbox.sandbox_id)
        assert [c.id for c in listed][:2] == ["default", "default-javascript"]
        assert made.id in [c.id for c in listed]
        assert all(c.exec_id is None and not c.busy for c in listed)  # none is running code
        restarted = boxyard.restart_code_context(sandbox.sandbox_id, made.id)
        assert restarted.id == made.id
        lost = boxyard.run_code(sandbox.sandbox_id, "y", context_id=made.id)
        assert lost.error is not None and lost.error["name"] == "NameError"
        deleted = boxyard.delete_code_context(sandbox.sandbox_id, made.id)
        assert (deleted.ok, deleted.deleted) == (True, made.id)
        with pytest.raises(NotFound):
            boxyard.run_code(sandbox.sandbox_id, "1", context_id=made.id)
        with pytest.raises(BadRequest) as refused:
            list(boxyard.run_code_stream(sandbox.sandbox_id, "1", language="cobol"))
        assert refused.value.field == "language"


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_the_asyncio_client_does_the_same(coder: Coder) -> None:
    async def go() -> None:
        async with AsyncBoxyardClient(coder.url, coder.token) as boxyard:
            sandbox = await boxyard.open(
                coder.pipeline.slug, {"launcher_type": "group", "launcher_id": "2"}
            )
            sandbox_id = sandbox.sandbox_id
            await boxyard.run_code(
                sandbox_id, "import pandas as pd\nframe = pd.DataFrame({'a': [1, 2]})"
            )
            table = await boxyard.run_code(sandbox_id, "frame")
            [shown] = table.displayed
            assert shown["is_main_result"] and "<table" in shown["html"]
            kinds = [
                item["type"]
                async for item in boxyard.run_code_stream(
                    sandbox_id, "print(len(frame))\nframe.a.sum()"
                )
            ]
            assert kinds == ["stdout", "result", "end"]
            made = await boxyard.create_code_context(sandbox_id, language="javascript")
            assert made.language == "javascript"
            ran = await boxyard.run_code(sandbox_id, "const k = 2; k * 21", context_id=made.id)
            assert ran.text == "42"
            assert made.id in [c.id for c in await boxyard.code_contexts(sandbox_id)]
            assert (await boxyard.restart_code_context(sandbox_id, made.id)).id == made.id
            assert (await boxyard.delete_code_context(sandbox_id, made.id)).ok
            with pytest.raises(NotFound):
                async for _ in boxyard.run_code_stream(sandbox_id, "1", context_id=made.id):
                    pass

    asyncio.run(go())


def test_run_code_sends_what_was_given_and_streams_ndjson_without_keepalives() -> None:
    ran = Recorder(
        {"exec_id": EXEC_ID, "context_id": "default", "language": "python",
         "status": "completed", "ok": True, "text": "2", "stdout": "", "stderr": "",
         "error": None, "execution_count": 1, "duration_ms": 9,
         "results": [{"type": "result", "is_main_result": True, "text": "2"},
                     {"type": "end", "status": "ok", "execution_count": 1}]}
    )  # fmt: skip
    result = call_sync(ran, "run_code", SANDBOX_ID, "1 + 1", timeout_seconds=5)
    assert (result.text, result.displayed, result.error) == ("2", [result.results[0]], None)
    assert ran.sent == {"code": "1 + 1", "timeout_seconds": 5}
    assert ran.request.extensions["timeout"]["read"] == 120 + 5
    lines = [{"type": "stdout", "text": "a\n"}, {"type": "keepalive"}, {"type": "end"}]
    body = "\n".join(json.dumps(line) for line in lines) + "\n"
    seen: list[httpx.Request] = []

    def ndjson(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text=body, headers={"Content-Type": "application/x-ndjson"})

    with BoxyardClient("http://boxyard.test", "tok", transport=httpx.MockTransport(ndjson)) as c:
        items = list(c.run_code_stream(SANDBOX_ID, "print('a')", context_id="mine"))
    assert items == [lines[0], lines[2]]
    assert seen[0].headers["Accept"] == "application/x-ndjson"
    assert json.loads(seen[0].content) == {"code": "print('a')", "context_id": "mine"}

    async def follow() -> list[dict[str, Any]]:
        transport = httpx.MockTransport(ndjson)
        async with AsyncBoxyardClient("http://boxyard.test", "tok", transport=transport) as c:
            return [item async for item in c.run_code_stream(SANDBOX_ID, "print('a')")]

    assert asyncio.run(follow()) == [lines[0], lines[2]]
    refusing = httpx.MockTransport(error(404, "not_found"))
    with (
        BoxyardClient("http://boxyard.test", "tok", transport=refusing) as c,
        pytest.raises(NotFound),
    ):
        list(c.run_code_stream(SANDBOX_ID, "1"))
