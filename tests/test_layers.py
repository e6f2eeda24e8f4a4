"""The tree's layering: each stage of the pipeline imports only the shared ground and the stages
before it, and nothing of the core imports a skin (docs/layout.md).

Every ``import`` and ``from … import`` of every module is read from its source (also those inside
functions, and those only for type checking), so a lazy import cannot slip past."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import memory_sql

PACKAGE = Path(memory_sql.__file__).parent

# Lowest first. A module may import its own layer and the layers below it.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "ground",
        {
            "errors",
            "models",
            "scope",
            "tenancy",
            "database",
            "driver_errors",
            "redaction",
            "schema",
            "migrations",
            "pattern_files",
            "tokens",
            "text_search",
            "config",
            "embeddings",
        },
    ),
    ("storage", {"storage"}),
    ("intake", {"intake"}),
    ("queue", {"queue"}),
    ("update", {"update"}),
    ("recall", {"recall"}),
    ("ops", {"ops"}),
    ("service", {"service"}),
    ("skins", {"server", "integrations", "cli", "demo", "mcp", "client", "__main__"}),
]
CORE = {name for layer, names in LAYERS if layer != "skins" for name in names}

# The dialect module sits in storage/ but is ground in what it imports (scope, tenancy, the
# error translator): the engine factory and the migrations, ground, call it (at call time:
# storage's package imports them).
GROUND_IN_STORAGE = "memory_sql.storage.dialects"
SKINS = dict(LAYERS)["skins"]


def _layer_of(top: str) -> int:
    for index, (_, names) in enumerate(LAYERS):
        if top in names:
            return index
    raise AssertionError(f"memory_sql.{top} belongs to no layer: add it to LAYERS")


def _modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE
    )


def _imported_tops(path: Path) -> set[str]:
    """The top-level memory_sql names (``intake``, ``storage``, …) that ``path`` imports."""
    relative = path.relative_to(PACKAGE).with_suffix("").parts
    return _tops_in(path.read_text(encoding="utf-8"), ["memory_sql", *relative[:-1]])


def _tops_in(source: str, package: list[str]) -> set[str]:
    tops: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            if target[0] != "memory_sql":
                continue
            if len(target) > 1:
                tops.add(target[1])
            else:  # from memory_sql import x / from . import x (at the top)
                tops.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "memory_sql" and len(parts) > 1:
                    tops.add(parts[1])
    return tops


def _top_of(path: Path) -> str:
    return path.relative_to(PACKAGE).with_suffix("").parts[0]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_imports_only_its_layer_and_those_below(path: Path) -> None:
    own = _layer_of(_top_of(path))
    above = {top for top in _imported_tops(path) if _layer_of(top) > own}
    known = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    if "storage" in above and _imported_modules(path, known) & {
        "memory_sql.storage",
        *(m for m in known if m.startswith("memory_sql.storage.")),
    } <= {GROUND_IN_STORAGE}:
        above.discard("storage")
    assert not above, (
        f"memory_sql/{path.relative_to(PACKAGE)} ({LAYERS[own][0]}) imports "
        f"{', '.join(sorted(above))}, a later stage or a skin"
    )


def test_the_core_never_imports_a_skin() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(_imported_tops(path) & SKINS)
        for path in _modules()
        if _top_of(path) in CORE
    }
    assert {name: tops for name, tops in offenders.items() if tops} == {}


def test_every_module_has_a_layer() -> None:
    tops = {_top_of(path) for path in _modules()}
    assert tops <= CORE | SKINS, sorted(tops - CORE - SKINS)


def test_the_checker_sees_a_lazy_inversion() -> None:
    """The checker itself: imports inside functions, relative or absolute, are found."""
    source = (
        "def late():\n    from ..service import MemoryService\n"
        "    import memory_sql.server.app\n    from .. import ops\n"
    )
    assert _tops_in(source, ["memory_sql", "intake"]) == {"service", "server", "ops"}
    assert _tops_in("from . import signals", ["memory_sql", "intake"]) == {"intake"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path, known: set[str]) -> set[str]:
    """The memory_sql modules ``path`` imports (also lazily), by dotted name."""
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                target = node.module or ""
            found |= {target} & known
            found |= {f"{target}.{alias.name}" for alias in node.names} & known
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names} & known
    return found - {name}


def test_no_two_modules_import_each_other() -> None:
    """A package and its own modules aside (``__init__`` re-exports them)."""
    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {name: _imported_modules(path, set(paths)) for name, path in paths.items()}
    circles = sorted(
        f"{a} <-> {b}"
        for a, imported in graph.items()
        for b in imported
        if a < b and a in graph[b] and not (b.startswith(a + ".") or a.startswith(b + "."))
    )
    assert circles == []


def test_the_dialect_module_imports_only_the_ground() -> None:
    """What lets the ground's engine factory and migrations call it."""
    path = PACKAGE / "storage" / "dialects.py"
    assert _imported_tops(path) <= dict(LAYERS)["ground"]
