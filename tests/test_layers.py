"""The floors of docs/architecture.md, held against the imports. Every module of the product is
on exactly one floor; a module imports only its own floor and those below; no two modules
import each other, however far round. Read from the source (imports inside functions too), so
a new module, an import that reaches up or one that closes a circle fails here, by name.

From the top: the entry points (HTTP, websockets, MCP, tasks, commands, admin, wiring), the
read models (what the pages and the API's fetches read), the services (one function per
operation; the Docker hosts' engines), the core (rows, the state table, the guard, events),
the runtime (engines and containers: no rows, no database) and the base (errors, actors,
threads, shared by all). A package's empty `__init__.py` imports nothing and has no floor."""

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("boxyard", "pipelines", "sandboxes", "hosts", "config")

# Top to bottom. A name holds the module of that name and every module under it; a module is
# on the floor of the longest name that holds it.
FLOORS: dict[str, tuple[str, ...]] = {
    "entry points": (
        "config", "boxyard.web",
        "sandboxes.api", "sandboxes.operations", "sandboxes.schemas", "sandboxes.mcp",
        "sandboxes.views", "sandboxes.urls", "sandboxes.downloads", "sandboxes.templatetags",
        "sandboxes.consumers", "sandboxes.e2b", "sandboxes.bay",
        "sandboxes.tasks", "sandboxes.admin", "sandboxes.apps", "sandboxes.management",
        "pipelines.api", "pipelines.tools", "pipelines.views", "pipelines.urls", "pipelines.forms",
        "pipelines.admin", "pipelines.apps", "pipelines.management",
        "hosts.views", "hosts.urls", "hosts.forms", "hosts.templatetags", "hosts.consumers",
        "hosts.admin", "hosts.apps", "hosts.management", "hosts.keeper",
    ),
    "read models": (
        "sandboxes.selectors", "sandboxes.dashboard", "sandboxes.fleet", "sandboxes.charts",
        "pipelines.selectors", "pipelines.mcp_config", "hosts.dashboard",
    ),
    "services": (
        "sandboxes.services", "sandboxes.images", "pipelines.services", "hosts.services",
        "hosts.engines",
    ),
    "core": (
        "sandboxes.models", "sandboxes.lifecycle", "sandboxes.guard", "sandboxes.events",
        "sandboxes.live", "sandboxes.metrics", "sandboxes.scripts",
        "pipelines.models", "pipelines.scope", "hosts.models",
    ),
    "runtime": ("sandboxes.runtime",),
    "base": ("boxyard",),
}  # fmt: skip
ORDER = list(FLOORS)


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _sources() -> dict[str, Path]:
    """Every module of the product (migrations and empty package files aside)."""
    found = {}
    for folder in PRODUCT:
        for path in (REPO / folder).rglob("*.py"):
            if "migrations" not in path.parts and path.read_text().strip():
                found[_module(path)] = path
    return found


def _named(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every import in `path`'s source, anywhere in it (name "": the
    module itself), relative imports made absolute."""
    parts = _module(path).split(".")
    package = parts if path.name == "__init__.py" else parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            origin = ".".join([*base, *([node.module] if node.module else [])])
            found += [(origin, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return found


def _imports(path: Path, modules: Iterable[str]) -> set[str]:
    """The modules of `modules` that `path` imports: `from a import b` is module `a.b` if
    there is one, else `a`."""
    known = set(modules)
    found = set()
    for origin, name in _named(path):
        found.add(f"{origin}.{name}" if f"{origin}.{name}" in known else origin)
    return found & known


def _reaches(path: Path, prefixes: tuple[str, ...]) -> list[str]:
    """What `path` imports of the packages `prefixes` (outside the product: docker, django)."""
    return sorted(
        origin
        for origin, _name in _named(path)
        if any(origin == prefix or origin.startswith(prefix + ".") for prefix in prefixes)
    )


def _graph() -> dict[str, set[str]]:
    sources = _sources()
    return {module: _imports(path, sources) - {module} for module, path in sorted(sources.items())}


def floor_of(module: str) -> str | None:
    held = [
        (len(name), floor)
        for floor, names in FLOORS.items()
        for name in names
        if module == name or module.startswith(name + ".")
    ]
    return max(held)[1] if held else None


def upward(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Each import of a module on a floor above the importer's."""
    found = []
    for module, imported in graph.items():
        floor = floor_of(module)
        for name in sorted(imported):
            above = floor_of(name)
            if floor and above and ORDER.index(above) < ORDER.index(floor):
                found.append(f"{module} ({floor}) imports {name} ({above})")
    return found


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_every_module_is_on_one_floor() -> None:
    names = [name for floor in FLOORS.values() for name in floor]
    assert sorted({name for name in names if names.count(name) > 1}) == []
    assert [module for module in _graph() if floor_of(module) is None] == []


def test_no_module_imports_a_floor_above_its_own() -> None:
    assert upward(_graph()) == []


def test_no_modules_import_each_other() -> None:
    assert circles(_graph()) == []


def test_the_runtime_reaches_no_database() -> None:
    reaching = [
        f"{module} imports {name}"
        for module, path in _sources().items()
        if floor_of(module) == "runtime"
        for name in _reaches(path, ("django.db", "django.apps", "django.contrib"))
    ]
    assert reaching == []


def test_only_the_runtime_imports_docker() -> None:
    outside = [
        f"{module} imports {name}"
        for module, path in _sources().items()
        if not module.startswith("sandboxes.runtime.docker")
        for name in _reaches(path, ("docker",))
    ]
    assert outside == []


def test_the_rules_catch_what_they_name() -> None:
    """The checks above, on made-up modules: each would fail on what it names."""
    assert floor_of("sandboxes.services.execs.running") == "services"
    assert floor_of("boxyard.web") == "entry points" and floor_of("boxyard.errors") == "base"
    assert floor_of("sandboxes.somewhere_new") is None
    assert upward({"sandboxes.runtime.agent": {"hosts.engines"}, "hosts.engines": {"boxyard"}}) == [
        "sandboxes.runtime.agent (runtime) imports hosts.engines (services)"
    ]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
