"""The layers of docs/architecture.md, held against the imports: nothing below imports
anything above. Entry points (API, views, consumers, tasks, admin, commands) sit on top, the
services below them, the core (models, lifecycle, guard, events, live) and the runtime at the
bottom. Read from the source, so a new import that breaks a layer fails here."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRY_POINTS = (
    "sandboxes.api", "sandboxes.views", "sandboxes.consumers", "sandboxes.tasks",
    "sandboxes.schemas", "sandboxes.admin", "sandboxes.management", "pipelines.views",
    "pipelines.api", "pipelines.admin", "pipelines.management", "config", "sandboxes.downloads",
    "sandboxes.mcp", "hosts.views", "hosts.urls", "hosts.consumers", "hosts.admin",
    "hosts.management", "hosts.keeper",
)  # fmt: skip
SERVICES = ("sandboxes.services", "pipelines.services", "sandboxes.images", "hosts.services")
CORE = (
    "sandboxes.models", "sandboxes.lifecycle", "sandboxes.guard", "sandboxes.events",
    "sandboxes.live", "sandboxes.runtime", "pipelines.models", "pipelines.scope", "boxyard",
    "hosts.models", "hosts.engines",
)  # fmt: skip


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _under(name: str, layers: tuple[str, ...]) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in layers)


def _breaches(layer: tuple[str, ...], above: tuple[str, ...]) -> list[str]:
    breaches = []
    for folder in ("boxyard", "pipelines", "sandboxes", "config", "hosts"):
        for path in (REPO / folder).rglob("*.py"):
            module = _module(path)
            if "migrations" in path.parts or not _under(module, layer):
                continue
            breaches += [
                f"{module} imports {name}" for name in _imports(path) if _under(name, above)
            ]
    return sorted(breaches)


def test_the_core_imports_no_service_and_no_entry_point() -> None:
    assert _breaches(CORE, SERVICES + ENTRY_POINTS) == []


def test_the_services_import_no_entry_point() -> None:
    assert _breaches(SERVICES, ENTRY_POINTS) == []


def test_only_the_runtime_imports_docker() -> None:
    outside = [
        found for found in _breaches(CORE + SERVICES + ENTRY_POINTS, ("docker",))
        if not found.startswith("sandboxes.runtime.docker")
    ]  # fmt: skip
    assert outside == []
