"""The house's floors (ADR 0047): a module imports only from its own floor or the floors below,
type-only imports included, so the tree reads from the ground up without a tool."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import provmw

ROOT = Path(provmw.__file__).parent

# Lowest first; a module belongs to the floor of its longest listed prefix.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("provmw.errors", "provmw._base", "provmw.options", "provmw.redaction")),
    ("values", ("provmw.context", "provmw.config", "provmw.messages", "provmw.requests", "provmw.responses",
                "provmw.pricing", "provmw._base.periods", "provmw.scrubbing", "provmw.pools", "provmw.operations")),
    ("transport", ("provmw._transport", "provmw.http")),
    ("providers", ("provmw.streams", "provmw.providers", "provmw.wire")),
    ("stores", ("provmw.stores",)),
    ("layers", ("provmw.pipeline", "provmw.structured", "provmw.middleware")),
    # The middleware package itself is the built-ins' table, built from the settings and the state.
    ("host", ("provmw.middleware.__init__", "provmw.settings", "provmw.destinations", "provmw.state",
              "provmw.hookspecs", "provmw.plugins", "provmw._plugins")),
    ("call", ("provmw._call", "provmw._call.facts")),
    ("manager", ("provmw.manager", "provmw.sync", "provmw.__init__")),
    ("edges", ("provmw.cli", "provmw.testing", "provmw.conformance", "provmw.usage_conformance", "provmw.ci",
               "provmw.gateway")),
)


def module_name(path: Path) -> str:
    """The dotted name, with ``__init__`` kept: a package's own module has a floor of its own."""
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)


MODULES = {module_name(path): path for path in ROOT.rglob("*.py")}
PACKAGES = {name.removesuffix(".__init__"): name for name in MODULES if name.endswith(".__init__")}


def floor(module: str) -> int:
    matches = [(len(prefix), number) for number, (_, prefixes) in enumerate(FLOORS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is on no floor: add it to FLOORS"
    return max(matches)[1]


def imported(path: Path) -> Iterator[str]:
    """Every provmw module ``path`` imports, lazily or for type checking too."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            name = PACKAGES.get(name, name)
            if name in MODULES:
                yield name
                break


def test_every_module_is_on_a_floor() -> None:
    assert [module for module in MODULES if not any(
        module == p or module.startswith(p + ".") for _, prefixes in FLOORS for p in prefixes)] == []


def test_no_import_runs_up_the_floors() -> None:
    upward = [f"{module} ({FLOORS[floor(module)][0]}) imports {target} ({FLOORS[floor(target)][0]})"
              for module, path in sorted(MODULES.items()) for target in imported(path) if floor(target) > floor(module)]
    assert upward == []


def test_the_top_level_holds_only_public_modules() -> None:
    assert sorted(path.name for path in ROOT.glob("_*.py") if path.name != "__init__.py") == []


def private(module: str) -> bool:
    return any(part.startswith("_") and part != "__init__" for part in module.split("."))


def test_plugins_import_only_public_provmw_modules() -> None:
    sources = (ROOT.parent / "plugins").rglob("provmw_*/**/*.py")
    assert [f"{path.name}: {name}" for path in sources for name in imported(path) if private(name)] == []
