import time

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone

from pipelines import selectors
from pipelines.models import Pipeline, PipelineToken, SessionTemplate, Skill, hash_token
from pipelines.selectors import principal_for_token

LANGUAGES = ["en", "zh-hans", "zh-hant", "ja", "ko", "es", "fr", "ru"]


@pytest.mark.django_db
def test_four_presets_are_seeded_in_eight_languages() -> None:
    presets = {p.template: p for p in SessionTemplate.objects.all()}
    assert set(presets) >= {
        "{launcher_type}_{launcher_id}",
        "{launcher_type}_{launcher_id}_{sender_id}",
        "{launcher_type}_{launcher_id}_{conversation_id}",
        "{query_id}",
    }
    assert presets["{launcher_type}_{launcher_id}"].is_default
    for preset in presets.values():
        for language in LANGUAGES:
            assert preset.labels[language].strip(), (preset.slug, language)
            assert preset.descriptions[language].strip(), (preset.slug, language)
    assert presets["{query_id}"].label("zh-hans") == "每条消息（完全隔离）"


@pytest.mark.django_db
def test_pipeline_defaults_are_hardened() -> None:
    pipeline = Pipeline.objects.create(slug="plain")
    assert pipeline.scope_template == "{launcher_type}_{launcher_id}"
    assert pipeline.network_enabled is False
    assert pipeline.retention == "temporary"
    pipeline.full_clean()


@pytest.mark.django_db
def test_unknown_scope_variable_is_refused_on_save_with_its_name() -> None:
    with pytest.raises(ValidationError) as caught:
        Pipeline(slug="p", scope_template="{launcher_type}_{chat_id}").full_clean()
    assert "chat_id" in str(caught.value.message_dict["scope_template"])


@pytest.mark.django_db
def test_profile_is_capped_by_operator_maximums(settings) -> None:
    settings.BOXYARD_MAX_MEMORY_MB = 2048
    with pytest.raises(ValidationError) as caught:
        Pipeline(slug="p", memory_mb=4096, network_enabled=True).full_clean()
    errors = caught.value.message_dict
    assert "BOXYARD_MAX_MEMORY_MB" in errors["memory_mb"][0]
    assert "BOXYARD_ALLOW_NETWORK" in errors["network_enabled"][0]
    settings.BOXYARD_ALLOW_NETWORK = True
    Pipeline(slug="p", memory_mb=2048, network_enabled=True).full_clean()


@pytest.mark.django_db
def test_only_allowlisted_images(settings) -> None:
    settings.BOXYARD_IMAGE_ALLOWLIST = ["boxyard/*", "python:3.12-slim"]
    Pipeline(slug="p", image="python:3.12-slim").full_clean()
    with pytest.raises(ValidationError, match="allowlist"):
        Pipeline(slug="p", image="evil/miner:latest").full_clean()


@pytest.mark.django_db
def test_skill_host_path_must_be_under_a_skill_root(settings, tmp_path) -> None:
    settings.BOXYARD_SKILL_ROOTS = [str(tmp_path)]
    (tmp_path / "web-search").mkdir()
    pipeline = Pipeline.objects.create(slug="p")
    Skill(pipeline=pipeline, name="web-search", host_path=str(tmp_path / "web-search")).full_clean()
    for path, message in [
        ("/var/run", "outside the skill roots"),
        (str(tmp_path / "web-search" / ".." / ".."), "outside the skill roots"),
        (str(tmp_path / "missing"), "not a directory"),
        ("relative/dir", "absolute"),
    ]:
        with pytest.raises(ValidationError, match=message):
            Skill(pipeline=pipeline, name="s", host_path=path).full_clean()
    with pytest.raises(ValidationError):
        Skill(pipeline=pipeline, name="../up", host_path=str(tmp_path / "web-search")).full_clean()


@pytest.mark.django_db
def test_tokens_are_stored_hashed_and_revocable() -> None:
    pipeline = Pipeline.objects.create(slug="p")
    row, plaintext = PipelineToken.issue(pipeline, name="ci")
    assert plaintext.startswith("byd_") and len(plaintext) > 40
    assert row.digest == hash_token(plaintext)
    assert plaintext not in {row.digest, row.prefix}
    assert PipelineToken.objects.active().get(digest=hash_token(plaintext)) == row
    row.revoke()
    assert not PipelineToken.objects.active().filter(pk=row.pk).exists()


@pytest.mark.django_db
def test_create_pipeline_command_prints_a_token_once(capsys) -> None:
    call_command("create_pipeline", "helpdesk", "--scope", "{sender_id}", "--print-token")
    out = capsys.readouterr()
    token = out.out.strip()
    pipeline = Pipeline.objects.get(slug="helpdesk")
    assert pipeline.scope_template == "{sender_id}"
    assert pipeline.tokens.get().digest == hash_token(token)
    assert "shown once" in out.err


@pytest.mark.django_db
def test_create_pipeline_command_refuses_a_bad_scope() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="unknown variable 'foo'"):
        call_command("create_pipeline", "bad", "--scope", "{foo}")
    assert not Pipeline.objects.filter(slug="bad").exists()


@pytest.mark.django_db
def test_a_skill_holding_a_docker_socket_is_refused(settings, tmp_path) -> None:
    import socket

    settings.BOXYARD_SKILL_ROOTS = [str(tmp_path)]
    (tmp_path / "sneaky" / "run").mkdir(parents=True)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sneaky" / "run" / "docker.sock"))
    try:
        pipeline = Pipeline.objects.create(slug="p")
        with pytest.raises(ValidationError, match="Docker socket"):
            Skill(pipeline=pipeline, name="sneaky", host_path=str(tmp_path / "sneaky")).full_clean()
    finally:
        server.close()


@pytest.mark.django_db
def test_a_token_revoked_after_use_is_refused_on_its_next_call() -> None:
    """A token's pipeline is kept briefly in the process; revoking it must not wait for that."""
    pipeline = Pipeline.objects.create(slug="p")
    row, plaintext = PipelineToken.issue(pipeline, name="ci")
    assert principal_for_token(plaintext).pipeline == pipeline
    assert principal_for_token(plaintext).pipeline == pipeline  # kept: no second lookup
    row.revoke()
    assert principal_for_token(plaintext) is None


@pytest.mark.django_db
def test_a_pipeline_change_reaches_its_tokens_next_call(django_assert_num_queries) -> None:
    pipeline = Pipeline.objects.create(slug="p", exec_timeout_seconds=30)
    _, plaintext = PipelineToken.issue(pipeline, name="ci")
    principal_for_token(plaintext)
    with django_assert_num_queries(0):
        assert principal_for_token(plaintext).pipeline.exec_timeout_seconds == 30
    pipeline.exec_timeout_seconds = 60
    pipeline.save()
    assert principal_for_token(plaintext).pipeline.exec_timeout_seconds == 60


@pytest.mark.django_db
def test_a_kept_token_answer_expires(monkeypatch) -> None:
    """Another process's change (here: one made behind the process's back) is seen within
    the time an answer is kept."""
    pipeline = Pipeline.objects.create(slug="p")
    row, plaintext = PipelineToken.issue(pipeline, name="ci")
    principal_for_token(plaintext)
    PipelineToken.objects.filter(pk=row.pk).update(revoked_at=timezone.now())  # no signal
    assert principal_for_token(plaintext) is not None
    later = time.monotonic() + selectors.PRINCIPAL_CACHE_SECONDS + 0.1
    monkeypatch.setattr(selectors.time, "monotonic", lambda: later)
    assert principal_for_token(plaintext) is None
