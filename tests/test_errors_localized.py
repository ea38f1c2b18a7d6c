"""A refusal in the reader's language: the dashboard says it in the admin's, from the same
error whose English message the API (and every log and row) keeps, whatever the caller's
Accept-Language. The refusals here are real ones, raised by the services (the fake runtime
stands in for the engine: none of them reaches it)."""

import html
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.utils import translation

from boxyard.errors import (
    N_,
    BoxyardError,
    InvalidInput,
    InvalidState,
    LeaseBusy,
    Message,
    TakenOver,
)
from pipelines import scope
from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.models import Sandbox, State
from sandboxes.services import Actor
from tests.conftest import CHAT
from tests.test_languages_pages import LATIN, NAMES

pytestmark = pytest.mark.django_db

ALICE = Actor("admin", "alice")
UNTIL = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


@pytest.fixture
def sandbox(pipeline: Any, bot: Any, fake_runtime: Any) -> Sandbox:
    """The bot's sandbox, its lease held by the scope key (group_123456)."""
    return services.open_sandbox(pipeline, CHAT, bot).sandbox


def refusal(act: Callable[[], object]) -> BoxyardError:
    with pytest.raises(BoxyardError) as raised:
        act()
    return raised.value


def english_in(text: str, data: tuple[str, ...]) -> list[str]:
    """The Latin words of a localized text once its data is taken out."""
    for value in data:
        text = text.replace(value, " ")
    return [word for word in LATIN.findall(re.sub(UNTIL, " ", text)) if word not in NAMES]


def test_a_busy_lease(sandbox, bot) -> None:
    request = services.clean_request(sandbox, cmd="true")
    error = refusal(lambda: services.run_exec(sandbox, request, ALICE, holder="admin:alice"))
    assert isinstance(error, LeaseBusy)
    assert re.fullmatch(f"the sandbox is leased to group_123456 until {UNTIL}", error.message)
    said = said_in_three_languages(error, ("group_123456",))
    assert said["zh-hans"].startswith("沙箱的租约由 group_123456 持有")
    assert said["ru"].startswith("песочницу арендует group_123456 до ")


def test_a_sandbox_taken_over(sandbox, bot) -> None:
    services.takeover_lease(sandbox, ALICE)
    request = services.clean_request(sandbox, cmd="true")
    error = refusal(lambda: services.run_exec(sandbox, request, bot))
    assert isinstance(error, TakenOver)
    assert error.message == "the sandbox was taken over by admin:alice; wait until it is released"
    said = said_in_three_languages(error, ("admin:alice",))
    assert (
        said["ja"]
        == "サンドボックスは admin:alice に引き継がれました。解放されるまで待ってください"
    )


def test_a_state_that_refuses_names_the_operation_state_and_reason(sandbox, bot) -> None:
    services.close_sandbox(sandbox, bot)
    request = services.clean_request(sandbox, cmd="true")
    error = refusal(lambda: services.run_exec(sandbox, request, bot))
    assert isinstance(error, InvalidState)
    assert error.message == (
        "cannot exec: the sandbox is stopped (closed); open it again to start it"
    )
    said = said_in_three_languages(error, ())
    # The operation, the state and the reason are words too: the choices' labels.
    assert said["zh-hans"] == "无法执行命令：沙箱状态为“已停止”（由持有者关闭）；再次打开它即可启动"
    assert said["ru"].startswith("нельзя выполнить команду: состояние песочницы — «Остановлена»")


def test_an_invalid_input_keeps_its_field_as_it_is(sandbox) -> None:
    error = refusal(lambda: services.takeover_lease(sandbox, ALICE, reason="x" * 201))
    assert isinstance(error, InvalidInput)
    assert error.message == "reason: must be at most 200 printable characters"
    said = said_in_three_languages(error, ("reason",))
    assert said["zh-hans"] == "reason: 最多 200 个可打印字符"
    empty = refusal(lambda: services.clean_request(sandbox, cmd=""))
    assert empty.message == "cmd: must not be empty"
    assert said_in_three_languages(empty, ("cmd",))["ja"] == "cmd: 空にはできません"


def test_a_missing_scope_variable_says_or_in_the_readers_language() -> None:
    error = refusal(lambda: scope.resolve("{launcher_id|sender_id}", {}))
    assert error.message == (
        "variables.launcher_id: the pipeline's sandbox scope needs launcher_id or sender_id, "
        "and the request has none"
    )
    said = said_in_three_languages(error, ("variables.launcher_id", "launcher_id", "sender_id"))
    assert "launcher_id или sender_id" in said["ru"]


def said_in_three_languages(error: BoxyardError, data: tuple[str, ...]) -> dict[str, str]:
    """The error as Chinese, Japanese and Russian readers see it: other than its data, no
    English word; its English message the same in each."""
    said = {}
    for language in ("zh-hans", "ja", "ru"):
        with translation.override(language):
            said[language] = error.localized()
            assert error.message == str(error) and error.as_dict()["message"] == error.message
        assert english_in(said[language], data) == [], (language, said[language])
    with translation.override("en"):
        assert error.localized() == error.message  # English readers read the API's words
    return said


def test_a_message_is_english_as_a_str_and_survives_a_slip_of_its_catalog() -> None:
    message = N_("the sandbox is leased to %(holder)s until %(until)s", holder="a", until="b")
    assert str(message) == "the sandbox is leased to a until b"
    assert BoxyardError(message).message == str(message)
    # A state as a value: its value in English, its label in a translated sentence.
    stopped = N_(
        "cannot %(operation)s: the sandbox is %(state)s", operation="x", state=State.STOPPED
    )
    assert str(stopped) == "cannot x: the sandbox is stopped"
    with translation.override("fr"):
        assert "« Arrêté »" in stopped.localized()
    # A template no catalog knows, or a translation that does not fit its values: English.
    with translation.override("ja"):
        assert Message("no such words %(x)s", x=1).localized() == "no such words 1"
        assert BoxyardError("plain words").localized() == "plain words"


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_says_a_refusal_in_the_admins_language_the_api_in_english(
    admin_client: Client, sandbox: Sandbox, pipeline: Any
) -> None:
    admin_client.cookies["django_language"] = "zh-hans"
    refused = admin_client.post(
        f"/sandboxes/{sandbox.pk}/run", {"cmd": "echo hi"}, HTTP_HX_REQUEST="true"
    )
    alert = re.search(r'<p class="error" role="alert">(.*?)</p>', refused.content.decode(), re.S)
    assert refused.status_code == 200 and alert is not None
    text = html.unescape(alert.group(1))
    assert text.startswith("沙箱的租约由 group_123456 持有，到期时间 ")
    assert english_in(text, ("group_123456",)) == []

    token = PipelineToken.issue(pipeline, name="bot")[1]
    bot_api = Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_ACCEPT_LANGUAGE="zh-hans")
    answer = bot_api.post(
        f"/api/v1/sandboxes/{sandbox.pk}/exec",
        {"cmd": "true", "holder": "admin:alice"},
        content_type="application/json",
    )
    assert answer.status_code == 409
    error = answer.json()["error"]
    assert error["code"] == "lease_busy"
    assert re.fullmatch(f"the sandbox is leased to group_123456 until {UNTIL}", error["message"])
