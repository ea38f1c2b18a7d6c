"""Boxyard's own images, built locally with no registry."""

import pytest
from django.conf import settings

from sandboxes import services
from sandboxes.images import ensure_image
from sandboxes.runtime import LABEL_WORKSPACE_UID
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


def test_test_image_is_tiny_busybox_with_a_sandbox_user(docker_engine) -> None:
    labels = docker_engine.image_labels(settings.BOXYARD_TEST_IMAGE)
    assert labels is not None and labels[LABEL_WORKSPACE_UID] == "10001"
    assert docker_engine.api.inspect_image(settings.BOXYARD_TEST_IMAGE)["Size"] < 5 * 1024 * 1024


def test_default_image_has_bash_and_python(make_pipeline, bot, docker_engine) -> None:
    # Built by `manage.py build_images` (the run command and CI do it); built here if missing.
    assert ensure_image(settings.BOXYARD_DEFAULT_IMAGE, progress=lambda line: None) in (
        "present",
        "built",
    )
    pipeline = make_pipeline(image=settings.BOXYARD_DEFAULT_IMAGE)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    request = services.clean_request(
        sandbox,
        cmd='echo "$BASH_VERSION" | cut -c1; python3 -c "import sys; print(sys.version_info[0])"; id -un',
    )
    result = services.run_exec(sandbox, request, bot)
    assert result.stdout == "5\n3\nsandbox\n", result.stderr
    services.write_file(sandbox, "hello.py", b"print(sum(range(10)))\n", bot)
    run = services.run_exec(
        sandbox, services.clean_request(sandbox, cmd=["python3", "hello.py"]), bot
    )
    assert run.stdout == "45\n"


def test_a_foreign_image_without_a_workspace_gets_one_for_the_sandbox_user(
    make_pipeline, bot, docker_engine, settings, tmp_path
) -> None:
    # An image Boxyard did not build: no /workspace and no workspace-uid label. The new volume
    # is handed to the sandbox user before the sandbox starts.
    import tarfile

    busybox = "/bin/busybox"
    tar_path = tmp_path / "rootfs.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(busybox, arcname="bin/busybox")
        for applet in (
            "sh",
            "chown",
            "id",
            "touch",
            "ls",
            "sleep",
            "cat",
            "setsid",
            "realpath",
            "stat",
            "mkdir",
            "mv",
            "chmod",
            "head",
            "rm",
            "find",
        ):
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type = tarfile.SYMTYPE
            info.linkname = "busybox"
            tar.addfile(info)
        tmp = tarfile.TarInfo("tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(tmp)
    reference = f"boxyard-test/foreign:{settings.BOXYARD_DEPLOYMENT}"
    docker_engine.import_image(tar_path, reference, ["ENV PATH=/bin"])
    try:
        settings.BOXYARD_IMAGE_ALLOWLIST = ["boxyard-test/*"]
        pipeline = make_pipeline(image=reference)
        sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
        result = services.run_exec(
            sandbox, services.clean_request(sandbox, cmd="id -u; stat -c %u /workspace"), bot
        )
        assert result.stdout == "10001\n10001\n", result.stderr
        services.write_file(sandbox, "ok.txt", b"mine", bot)
    finally:
        services.close_sandbox(sandbox, bot, delete_workspace=True)
        docker_engine.remove_image(reference)
