"""The chat's sandbox, for a caller that leaves the sandbox out: its scope key's running
sandbox, found or opened; or, where every open makes a sandbox of its own, the one the
caller's session opened, kept in a row that any web process (also after a restart) reads, a
pipeline's rows within its cap. Bookkeeping only: the fake runtime."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone, translation

from boxyard.errors import InvalidInput, NotFound
from sandboxes import services
from sandboxes.models import Sandbox, SessionSandbox
from sandboxes.services import chats
from tests.conftest import CHAT

pytestmark = pytest.mark.django_db

PER_MESSAGE = "msg_{query_id|uuid}"


@pytest.fixture
def per_message(make_pipeline: Any) -> Any:
    """A pipeline whose every open makes a sandbox of its own."""
    return make_pipeline(slug="per-message", scope_template=PER_MESSAGE)


def test_the_chats_running_sandbox_is_found_and_none_is_opened(
    pipeline: Any, bot: Any, fake_runtime: Any
) -> None:
    opened = services.open_sandbox(pipeline, CHAT, bot).sandbox
    found = services.chat_sandbox(pipeline, CHAT, bot, open_it=False)
    assert found == str(opened.pk)
    assert Sandbox.objects.count() == 1


def test_a_chat_without_a_sandbox_gets_one_opened_only_when_asked(
    pipeline: Any, bot: Any, fake_runtime: Any
) -> None:
    with pytest.raises(NotFound):
        services.chat_sandbox(pipeline, CHAT, bot, open_it=False)
    assert not Sandbox.objects.exists()
    opened = services.chat_sandbox(pipeline, CHAT, bot)
    assert str(Sandbox.objects.get().pk) == opened


def test_where_every_open_is_new_a_caller_without_a_session_must_name_its_sandbox(
    per_message: Any, bot: Any, fake_runtime: Any
) -> None:
    with pytest.raises(InvalidInput) as refused:
        services.chat_sandbox(per_message, {}, bot)
    assert refused.value.field == "sandbox_id"
    assert not Sandbox.objects.exists()


def test_a_sessions_sandbox_is_found_again_from_its_row_after_a_restart(
    per_message: Any, bot: Any, fake_runtime: Any
) -> None:
    opened = services.chat_sandbox(per_message, {}, bot, session="mcp:one")
    assert str(SessionSandbox.objects.get(pk="mcp:one").sandbox_id) == opened
    # Nothing of the first call is kept in this process: a restarted (or another) web
    # process reads the row, and the session's next call opens nothing new.
    again = services.chat_sandbox(per_message, {}, bot, session="mcp:one", open_it=False)
    assert again == opened
    other = services.chat_sandbox(per_message, {}, bot, session="mcp:two")
    assert other != opened and Sandbox.objects.count() == 2


def test_a_session_finds_no_sandbox_of_another_pipeline(
    per_message: Any, make_pipeline: Any, bot: Any, fake_runtime: Any
) -> None:
    other = make_pipeline(slug="other", scope_template=PER_MESSAGE)
    services.chat_sandbox(other, {}, bot, session="mcp:one")
    with pytest.raises(NotFound):
        services.chat_sandbox(per_message, {}, bot, session="mcp:one", open_it=False)


def test_a_session_that_ended_finds_nothing(per_message: Any, bot: Any, fake_runtime: Any) -> None:
    services.chat_sandbox(per_message, {}, bot, session="mcp:one")
    services.forget_session("mcp:one")
    assert not SessionSandbox.objects.exists()
    with pytest.raises(NotFound):
        services.chat_sandbox(per_message, {}, bot, session="mcp:one", open_it=False)


def test_a_pipeline_keeps_its_cap_of_session_rows_the_least_recently_used_go(
    per_message: Any, make_pipeline: Any, bot: Any, fake_runtime: Any, settings: Any
) -> None:
    settings.BOXYARD_MCP_SESSIONS_PER_PIPELINE = 2
    other = make_pipeline(slug="other", scope_template=PER_MESSAGE)
    theirs = services.chat_sandbox(other, {}, bot, session="mcp:theirs")
    sandbox = Sandbox.objects.get(pk=theirs)
    for number in range(3):
        services.remember_session_sandbox(f"mcp:{number}", per_message, str(sandbox.pk))
        SessionSandbox.objects.filter(pk=f"mcp:{number}").update(
            used_at=timezone.now() - timedelta(seconds=10 - number)
        )
    services.remember_session_sandbox("mcp:3", per_message, str(sandbox.pk))
    kept = set(SessionSandbox.objects.filter(pipeline=per_message).values_list("pk", flat=True))
    assert kept == {"mcp:2", "mcp:3"}
    assert SessionSandbox.objects.filter(pk="mcp:theirs").exists()  # another pipeline's cap


def test_a_row_unused_for_a_sessions_idle_time_goes_with_the_next_of_its_pipeline(
    per_message: Any, bot: Any, fake_runtime: Any, settings: Any
) -> None:
    settings.BOXYARD_MCP_SESSION_IDLE_SECONDS = 60
    opened = services.chat_sandbox(per_message, {}, bot, session="mcp:old")
    SessionSandbox.objects.update(used_at=timezone.now() - timedelta(seconds=61))
    services.remember_session_sandbox("mcp:new", per_message, opened)
    assert list(SessionSandbox.objects.values_list("pk", flat=True)) == ["mcp:new"]


def test_a_row_in_use_is_kept_fresh_without_a_write_at_every_call(
    per_message: Any, bot: Any, fake_runtime: Any, settings: Any
) -> None:
    settings.BOXYARD_MCP_SESSION_IDLE_SECONDS = 100
    services.chat_sandbox(per_message, {}, bot, session="mcp:one")
    recent = timezone.now() - timedelta(seconds=100 / chats._TOUCH_PART / 2)
    SessionSandbox.objects.update(used_at=recent)
    services.chat_sandbox(per_message, {}, bot, session="mcp:one")
    assert SessionSandbox.objects.get().used_at == recent
    older = timezone.now() - timedelta(seconds=100 / chats._TOUCH_PART * 2)
    SessionSandbox.objects.update(used_at=older)
    services.chat_sandbox(per_message, {}, bot, session="mcp:one")
    assert SessionSandbox.objects.get().used_at > older


def test_a_sessions_row_goes_with_its_sandbox(
    per_message: Any, bot: Any, fake_runtime: Any
) -> None:
    opened = services.chat_sandbox(per_message, {}, bot, session="mcp:one")
    Sandbox.objects.filter(pk=opened).delete()
    assert not SessionSandbox.objects.exists()


def test_the_chats_refusals_are_english_for_a_program_and_translated_for_a_person(
    pipeline: Any, per_message: Any, bot: Any, fake_runtime: Any
) -> None:
    with pytest.raises(InvalidInput) as generated:
        services.chat_sandbox(per_message, {}, bot)
    with pytest.raises(NotFound) as missing:
        services.chat_sandbox(pipeline, CHAT, bot, open_it=False)
    assert generated.value.message == (
        "sandbox_id: this pipeline's sandbox scope gives every open a sandbox of its own: call "
        "sandbox_open and pass the sandbox_id it returns"
    )
    assert missing.value.message == (
        "this chat has no open sandbox: run a command or call sandbox_open first"
    )
    with translation.override("fr"):
        assert generated.value.localized().startswith(
            "sandbox_id: la portée de bac à sable de ce pipeline donne à chaque ouverture"
        )
        assert missing.value.localized().startswith("cette conversation n'a aucun bac à sable")
