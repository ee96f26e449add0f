"""The rooms of provmw import in one direction: no module imports, even lazily, one that imports it back."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import provmw

ROOT = Path(provmw.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in ROOT.rglob("*.py")}


def imported(module: str, path: Path) -> Iterator[str]:
    """What ``module`` imports at run time: at the top, or inside functions (not under TYPE_CHECKING)."""
    def walk(node: ast.AST) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                yield from (alias.name for alias in child.names if alias.name in MODULES)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                for alias in child.names:
                    name = f"{child.module}.{alias.name}"
                    yield name if name in MODULES else child.module
            yield from walk(child)

    yield from (name for name in walk(ast.parse(path.read_text())) if name in MODULES and name != module)


GRAPH = {module: set(imported(module, path)) for module, path in MODULES.items()}


def cycle_from(start: str) -> list[str] | None:
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        module, trail = stack.pop()
        for target in GRAPH[module]:
            if target == start:
                return [*trail, start]
            if target not in seen:
                seen.add(target)
                stack.append((target, [*trail, target]))
    return None


def test_no_module_imports_itself_back() -> None:
    cycles = [cycle for module in sorted(GRAPH) if (cycle := cycle_from(module))]
    assert cycles == [], " -> ".join(cycles[0]) if cycles else ""


def test_the_walk_sees_lazy_imports() -> None:
    assert "provmw.middleware" in GRAPH["provmw._plugins.builtin"]  # imported inside the hook function


def _modules_after(code: str, *, autoload: bool = False) -> set[str]:
    """The top-level packages imported after running ``code`` in a fresh interpreter (with the
    installed plugins loaded when ``autoload``)."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            env={"PROVMW_DISABLE_PLUGIN_AUTOLOAD": "0" if autoload else "1", "PATH": ""})
    return set(result.stdout.split())


def test_import_provmw_never_imports_opentelemetry() -> None:
    assert "opentelemetry" not in _modules_after("import provmw")


def test_a_manager_without_the_otel_plugin_imports_no_opentelemetry() -> None:
    modules = _modules_after("import provmw\nprovmw.ServiceManager()")
    assert "provmw" in modules and "opentelemetry" not in modules


def test_a_manager_without_state_settings_imports_no_redis_or_postgres_driver() -> None:
    modules = _modules_after("import provmw\nprovmw.ServiceManager()", autoload=True)
    assert "provmw_redis" in modules and not {"redis", "psycopg"} & modules


def test_a_manager_imports_aiohttp_only_when_it_makes_a_request() -> None:
    modules = _modules_after("import provmw\nprovmw.ServiceManager()", autoload=True)
    assert "provmw_azure" in modules and "aiohttp" not in modules


def test_a_manager_imports_yarl_only_when_it_makes_a_request() -> None:
    modules = _modules_after("import provmw\nprovmw.ServiceManager()", autoload=True)
    assert "provmw_bedrock" in modules and "yarl" not in modules


def test_the_exception_table_loads_aiohttp_when_asked_for() -> None:
    modules = _modules_after("import provmw.http\nprovmw.http.EXCEPTION_ERRORS")
    assert "aiohttp" in modules
