import pytest

pytestmark = pytest.mark.django_db


def test_a_pipeline_gets_its_tools_and_prompt(support) -> None:
    response = support.call("get", "/pipelines/support/tools")
    assert response.status_code == 200
    body = response.json()
    names = [tool["function"]["name"] for tool in body["openai"]]
    assert names == [tool["name"] for tool in body["anthropic"]]
    assert {"sandbox_open", "sandbox_exec", "sandbox_fs_write", "sandbox_close"} <= set(names)
    assert "/workspace" in body["system_prompt"]


def test_another_pipelines_tools_are_not_found(support, billing) -> None:
    assert billing.call("get", "/pipelines/support/tools").status_code == 404
