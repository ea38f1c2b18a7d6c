"""The code interpreter through the bot API, on the real engine with real kernels."""

import base64
import json
import struct

import pytest

from tests.code.conftest import Coder

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", raw[16:24])
    return width, height


def test_state_stays_between_runs_and_results_come_with_their_representations(
    coder: Coder,
) -> None:
    sandbox = coder.open()
    first = coder.run(sandbox, "x = 1\nprint('hello')")
    assert first["ok"] is True and first["stdout"] == "hello\n" and first["text"] is None
    second = coder.run(sandbox, "x + 1")
    assert second["text"] == "2" and second["execution_count"] == 2
    chart = coder.run(
        sandbox,
        "import matplotlib.pyplot as plt\n"
        "fig = plt.figure(figsize=(4, 3), dpi=100)\n"
        "plt.plot([1, 2, 3], [4, 5, 6], label='sales')\nplt.title('Sales');",
    )
    [figure] = [r for r in chart["results"] if r["type"] == "result"]
    assert png_size(figure["png"]) == (400, 300)
    assert figure["chart"]["type"] == "line" and figure["chart"]["title"] == "Sales"
    assert figure["chart"]["elements"][0]["points"] == [[1, 4], [2, 5], [3, 6]]
    table = coder.run(sandbox, "import pandas as pd\npd.DataFrame({'a': [1, 2]})")
    [frame] = [r for r in table["results"] if r["type"] == "result"]
    assert frame["is_main_result"] and "<table" in frame["html"] and "a" in frame["text"]


def test_an_error_comes_with_its_name_value_and_traceback(coder: Coder) -> None:
    sandbox = coder.open()
    failed = coder.run(sandbox, "def f():\n    raise ValueError('boom')\nf()")
    assert failed["ok"] is False and failed["status"] == "completed"
    assert failed["error"]["name"] == "ValueError" and failed["error"]["value"] == "boom"
    assert "f()" in failed["error"]["traceback"]


def test_a_timeout_interrupts_the_kernel_and_the_state_stays(coder: Coder) -> None:
    sandbox = coder.open()
    coder.run(sandbox, "kept = 41")
    stuck = coder.run(sandbox, "while True:\n    pass", timeout_seconds=2)
    assert stuck["status"] == "timed_out" and stuck["error"]["name"] == "KeyboardInterrupt"
    assert coder.run(sandbox, "kept + 1")["text"] == "42"


def test_results_stream_as_ndjson_in_order(coder: Coder) -> None:
    sandbox = coder.open()
    answer = coder.call(
        "post",
        f"/sandboxes/{sandbox}/code",
        json={"code": "import time\nprint('a')\ntime.sleep(0.3)\nprint('b')\n7 * 6"},
        headers={"Accept": "application/x-ndjson"},
        stream=True,
    )
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in answer.iter_lines() if line]
    kinds = [line["type"] for line in lines if line["type"] != "keepalive"]
    assert kinds == ["stdout", "stdout", "result", "end"]
    assert lines[-1]["status"] == "ok" and lines[-1]["exec_id"]


def test_contexts_are_separate_restart_loses_state_and_javascript_runs(coder: Coder) -> None:
    sandbox = coder.open()
    made = coder.call("post", f"/sandboxes/{sandbox}/code/contexts", json={})
    assert made.status_code == 201, made.text
    context = made.json()["id"]
    coder.run(sandbox, "y = 'mine'", context_id=context)
    elsewhere = coder.run(sandbox, "y")
    assert elsewhere["error"]["name"] == "NameError"
    assert coder.run(sandbox, "y", context_id=context)["text"] == "'mine'"
    listed = coder.call("get", f"/sandboxes/{sandbox}/code/contexts").json()["contexts"]
    assert [c["id"] for c in listed][:2] == ["default", "default-javascript"]
    assert context in [c["id"] for c in listed]
    restarted = coder.call("post", f"/sandboxes/{sandbox}/code/contexts/{context}/restart")
    assert restarted.status_code == 200, restarted.text
    assert coder.run(sandbox, "y", context_id=context)["error"]["name"] == "NameError"
    assert coder.call("delete", f"/sandboxes/{sandbox}/code/contexts/{context}").status_code == 200
    gone = coder.call(
        "post", f"/sandboxes/{sandbox}/code", json={"code": "1", "context_id": context}
    )
    assert gone.status_code == 404
    js = coder.run(sandbox, "let n = 20; n + 1", language="javascript")
    assert js["text"] == "21" and js["language"] == "javascript"
    assert coder.run(sandbox, "n * 2", language="js")["text"] == "40"


def test_another_pipeline_sees_no_kernel_of_this_one(coder: Coder, other: Coder) -> None:
    sandbox = coder.open()
    coder.run(sandbox, "secret = 1")
    assert (
        other.call("post", f"/sandboxes/{sandbox}/code", json={"code": "secret"}).status_code == 404
    )
    theirs = other.open()
    assert other.run(theirs, "secret")["error"]["name"] == "NameError"


def test_bad_input_is_a_400_naming_the_field(coder: Coder) -> None:
    sandbox = coder.open()
    for body, field in (
        ({"code": "1", "language": "cobol"}, "language"),
        ({"code": "1", "context_id": "../x"}, "context_id"),
        ({"code": 5}, "code"),
        ({"code": "1", "timeout_seconds": 0}, "timeout_seconds"),
    ):
        answer = coder.call("post", f"/sandboxes/{sandbox}/code", json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert field in answer.text


def test_a_sandbox_holds_at_most_14_contexts_besides_the_default_ones(coder: Coder) -> None:
    sandbox = coder.open()
    path = f"/sandboxes/{sandbox}/code/contexts"
    for _ in range(14):
        assert coder.call("post", path, json={"language": "javascript"}).status_code == 201
    refused = coder.call("post", path, json={})
    assert refused.status_code == 429, refused.text
    assert "at most 14 code contexts" in refused.json()["error"]["message"]
    assert len(coder.call("get", path).json()["contexts"]) == 16
