"""E2B's code interpreter SDK (`e2b-code-interpreter`) and smolagents' E2B executor, unchanged,
against a served Boxyard: the sandbox's kernels on port 49999, on the real engine."""

import asyncio
import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from django.conf import settings
from e2b import NotFoundException, TimeoutException
from e2b_code_interpreter import AsyncSandbox, Sandbox
from smolagents import ChatMessage, CodeAgent, MessageRole, Model

from tests.conftest import CHAT
from tests.e2b.conftest import Bot, bot_of
from tests.servers import Server, served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

IMAGE = settings.BOXYARD_DEFAULT_IMAGE


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, engine: Any
) -> Iterator[Server]:
    """A Boxyard whose pipelines may run the default image (the one with the kernels)."""
    with served(
        tmp_path_factory.mktemp("e2b-code"),
        BOXYARD_SECRET_KEY=settings.SECRET_KEY,
        BOXYARD_IMAGE_ALLOWLIST=f"{settings.BOXYARD_TEST_IMAGE},{IMAGE}",
    ) as running:
        yield running


@pytest.fixture
def analyst(server: Server, docker_engine: Any, make_pipeline: Any) -> Bot:
    return bot_of(make_pipeline(slug="analysts", image=IMAGE))


def test_runs_keep_their_state_and_give_output_charts_and_errors(
    server: Server, analyst: Bot
) -> None:
    sbx = Sandbox.create(metadata=CHAT, **analyst.opts(server))
    assert sbx.traffic_access_token
    first = sbx.run_code("x = 41 + 1\nprint('hi')\nx")
    assert first.text == "42" and first.logs.stdout == ["hi\n"] and first.error is None
    told: list[Any] = []
    second = sbx.run_code("import sys\nprint(x, file=sys.stderr)\nprint(x)", on_stdout=told.append)
    assert [out.line for out in told] == ["42\n"] and told[0].timestamp
    assert second.logs.stderr == ["42\n"] and second.execution_count == first.execution_count + 1
    chart = sbx.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.title('up')\nplt.show()"
    )
    [figure] = chart.results
    assert base64.b64decode(figure.png or "")[:4] == b"\x89PNG" and not figure.is_main_result
    failed = sbx.run_code("def f():\n    raise ValueError('boom')\nf()")
    assert failed.error is not None
    assert (failed.error.name, failed.error.value) == ("ValueError", "boom")
    assert "f()" in failed.error.traceback
    envs = sbx.run_code("import os\nos.environ.get('TONE')", envs={"TONE": "calm"})
    assert envs.text == "calm" and sbx.run_code("os.environ.get('TONE')").text is None
    assert sbx.run_code("[1, 2].map(n => n * 21)[1]", language="js").text == "42"


def test_contexts_are_made_listed_restarted_and_removed(server: Server, analyst: Bot) -> None:
    sbx = Sandbox.create(metadata=CHAT, **analyst.opts(server))
    context = sbx.create_code_context(cwd="/tmp")
    assert context.language == "python" and context.cwd == "/tmp"
    assert sbx.run_code("import os\nkept = 1\nos.getcwd()", context=context).text == "/tmp"
    assert sbx.run_code("'kept' in globals()").text == "False"  # the default context's
    assert context.id in [listed.id for listed in sbx.list_code_contexts()]
    sbx.restart_code_context(context)
    assert sbx.run_code("'kept' in globals()", context=context).text == "False"
    sbx.remove_code_context(context)
    assert context.id not in [listed.id for listed in sbx.list_code_contexts()]
    with pytest.raises(NotFoundException):
        sbx.remove_code_context(context.id)
    with pytest.raises(NotFoundException):
        sbx.run_code("1", context=context)


def test_the_async_sdk_runs_code_too(server: Server, analyst: Bot) -> None:
    async def session() -> None:
        sbx = await AsyncSandbox.create(metadata=CHAT, **analyst.opts(server))
        await sbx.run_code("y = 6 * 7")
        assert (await sbx.run_code("y")).text == "42"
        context = await sbx.create_code_context(language="js")
        assert context.language == "javascript"
        assert (await sbx.run_code("40 + 2", context=context)).text == "42"
        await sbx.remove_code_context(context)

    asyncio.run(session())


def test_a_call_without_the_sandbox_tokens_or_with_bad_input_is_refused(
    server: Server, analyst: Bot
) -> None:
    sbx = Sandbox.create(metadata=CHAT, **analyst.opts(server))
    stranger = Sandbox(
        sandbox_id=sbx.sandbox_id,
        sandbox_domain=None,
        envd_version=sbx._envd_version,
        envd_access_token=None,
        traffic_access_token="not-its-token",
        connection_config=sbx.connection_config,
    )
    with pytest.raises(Exception, match="401"):
        stranger.list_code_contexts()
    headers = {
        "E2b-Sandbox-Id": sbx.sandbox_id,
        "E2b-Sandbox-Port": "49999",
        "E2B-Traffic-Access-Token": sbx.traffic_access_token or "",
    }
    bad = requests.post(
        f"{server.url}/e2b/sandbox/execute", json={"code": 5}, headers=headers, timeout=30
    )
    assert (bad.status_code, bad.text) == (400, "code: must be a string")


class ScriptedModel(Model):
    """A model that answers with the code it is given, one reply a step."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(model_id="scripted")
        self.replies = list(replies)

    def generate(self, messages: Any, stop_sequences: Any = None, **kwargs: Any) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content=self.replies.pop(0))


def test_a_smolagents_code_agent_keeps_its_variables_across_steps(
    server: Server, analyst: Bot, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in analyst.opts(server).items():
        monkeypatch.setenv(f"E2B_{name.upper()}", value)
    model = ScriptedModel(
        [
            "Thought: compute.\n<code>\ny = 6 * 7\nprint(y)\n</code>",
            "Thought: answer.\n<code>\nfinal_answer(y)\n</code>",
        ]
    )
    agent = CodeAgent(tools=[], model=model, executor_type="e2b", max_steps=3, verbosity_level=0)
    try:
        assert agent.run("What is 6*7?") == 42
    finally:
        agent.cleanup()


def test_a_client_that_times_out_has_the_run_interrupted_and_the_state_kept(
    server: Server, analyst: Bot
) -> None:
    sbx = Sandbox.create(metadata=CHAT, **analyst.opts(server))
    sbx.run_code("kept = 41")
    with pytest.raises(TimeoutException, match="Execution timed out"):
        sbx.run_code("import time\ntime.sleep(30)", timeout=1.5)
    began = time.monotonic()
    assert sbx.run_code("kept + 1").text == "42"
    assert time.monotonic() - began < 10
