import pytest

from boxyard.errors import InvalidInput
from pipelines import scope


@pytest.mark.parametrize(
    "template",
    [
        "{launcher_type}_{launcher_id}",
        "{launcher_type}_{launcher_id}_{sender_id}",
        "{launcher_type}_{launcher_id}_{conversation_id}",
        "{query_id}",
        "{user_id}:{task_id|conversation_id|uuid}",
        "workflow:{workflow_run_id}:{session_key}",
        "{sender_id}",
        "{uuid}",
    ],
)
def test_valid_templates(template: str) -> None:
    scope.validate(template)


@pytest.mark.parametrize(
    ("template", "names"),
    [
        ("{launcher_type}_{chat}", "unknown variable 'chat'"),
        ("{task_id|uuid|conversation_id}", "'uuid' must come last"),
        ("{launcher_id", "unbalanced brace"),
        ("launcher_id}", "unbalanced brace"),
        ("static-key", "names no variable"),
        ("", "empty"),
        ("{}", "empty variable name"),
        ("{sender_id|sender_id}", "repeats"),
    ],
)
def test_invalid_templates_name_the_problem(template: str, names: str) -> None:
    with pytest.raises(scope.TemplateError, match=names):
        scope.validate(template)


def test_resolve_substitutes_variables() -> None:
    key = scope.resolve(
        "{launcher_type}_{launcher_id}_{sender_id}",
        {"launcher_type": "group", "launcher_id": 123456, "sender_id": "789", "extra": "x"},
    )
    assert key == "group_123456_789"


def test_missing_variable_is_an_error_naming_it() -> None:
    with pytest.raises(InvalidInput) as caught:
        scope.resolve("{launcher_type}_{launcher_id}", {"launcher_type": "group"})
    assert caught.value.field == "variables.launcher_id"
    assert "launcher_id" in caught.value.message


def test_empty_value_counts_as_missing_never_unknown() -> None:
    with pytest.raises(InvalidInput, match="launcher_id"):
        scope.resolve(
            "{launcher_type}_{launcher_id}", {"launcher_type": "group", "launcher_id": ""}
        )


def test_fallback_chain_takes_the_first_present() -> None:
    template = "{user_id}:{task_id|conversation_id|uuid}"
    assert (
        scope.resolve(template, {"user_id": "u1", "task_id": "t1", "conversation_id": "c"})
        == "u1:t1"
    )
    assert scope.resolve(template, {"user_id": "u1", "conversation_id": "c1"}) == "u1:c1"
    generated = scope.resolve(template, {"user_id": "u1"})
    assert generated.startswith("u1:") and len(generated) == len("u1:") + 32
    assert scope.resolve(template, {"user_id": "u1"}) != generated


def test_chain_without_uuid_names_every_alternative_when_all_missing() -> None:
    with pytest.raises(InvalidInput, match="task_id or conversation_id"):
        scope.resolve("{task_id|conversation_id}", {})


def test_workflow_template_of_seed_001() -> None:
    key = scope.resolve(
        "workflow:{workflow_run_id}:{session_key}",
        {"workflow_run_id": "run_9", "session_key": "default"},
    )
    assert key == "workflow:run_9:default"


@pytest.mark.parametrize("value", [True, 1.5, [], {}, "a\nb", "x\x00"])
def test_bad_variable_values_are_refused(value: object) -> None:
    with pytest.raises(InvalidInput, match=r"variables\.sender_id"):
        scope.resolve("{sender_id}", {"sender_id": value})


def test_keys_may_hold_any_characters() -> None:
    key = scope.resolve(
        "{launcher_type}/{launcher_id}", {"launcher_type": "私聊", "launcher_id": "a b/../c"}
    )
    assert key == "私聊/a b/../c"
