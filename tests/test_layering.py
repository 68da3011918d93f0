"""The import graph runs one way: the worker packages (compactor/, committer/) import the
library, never the reverse, and the public value types (lsmstore/types.py) import no
engine module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ("compactor", "committer")


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``path``, at any depth (type-checking
    blocks and function bodies too)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def _runtime_imports(path: Path) -> list[tuple[int, str]]:
    """Like :func:`_imports`, leaving out what ``if TYPE_CHECKING:`` imports."""
    tree = ast.parse(path.read_text(), str(path))
    checking = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for stmt in node.body
        for n in ast.walk(stmt)
    }
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def test_the_library_imports_no_worker_package() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((ROOT / "lsmstore").rglob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0] in WORKERS
    ]
    assert found == []


def test_the_worker_packages_hold_only_their_mains_and_loops() -> None:
    for worker in WORKERS:
        modules = sorted(p.name for p in (ROOT / worker).glob("*.py"))
        assert modules == ["__init__.py", "__main__.py", "worker.py"], worker


def test_the_value_types_import_no_engine_module() -> None:
    lsmstore_modules = [
        module
        for _, module in _runtime_imports(ROOT / "lsmstore" / "types.py")
        if module.split(".")[0] == "lsmstore"
    ]
    assert lsmstore_modules == ["lsmstore.errors"]
