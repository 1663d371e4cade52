"""docs/architecture.md's table of who may import whom, checked against every import in scaling/.

The table is parsed from the document (so the document cannot drift from the code), and every
``import`` / ``from ... import`` in every module under ``scaling/`` is read from its syntax tree,
lazy imports inside functions included. Each module belongs to a package: a folder of
``scaling/`` or one of its top-level modules; ``scaling/__init__.py`` is the package ``scaling``.
``torch`` and ``ray`` count as packages too: only the rows that list them may import them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple, Optional


ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "scaling"
DOC = ROOT / "docs" / "architecture.md"
HEAVY = ("torch", "ray")


class Row(NamedTuple):
    layer: int
    allowed: Optional[frozenset[str]]  # None: everything


class Edge(NamedTuple):
    source: str
    target: str
    where: str  # path:line


def package_of_path(rel: str) -> str:
    """``scaling/cli/``, ``scaling/cli/x.py`` -> cli; ``scaling/rules.py`` -> rules; ``scaling/__init__.py`` -> scaling."""
    parts = Path(rel.rstrip("/")).parts
    assert parts[0] == "scaling", rel
    if len(parts) == 1 or parts[1] == "__init__.py":
        return "scaling"
    return parts[1].removesuffix(".py")


def read_table() -> dict[str, Row]:
    text = DOC.read_text()
    section = text.split("## Packages and who may import whom", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, Row] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`scaling/"):
            continue
        package = package_of_path(cells[0].strip("`"))
        assert package not in rows, f"{package} has two rows"
        allowed = None if cells[3].startswith("everything") else frozenset(re.findall(r"`([A-Za-z_]+)`", cells[3]))
        rows[package] = Row(int(cells[1]), allowed)
    assert rows, f"no package table found in {DOC}"
    return rows


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module under scaling/."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _target(name: str, modules: dict[str, Path]) -> Optional[str]:
    """The package a dotted import name belongs to; None for third-party modules we do not police."""
    top = name.split(".")[0]
    if top in HEAVY:
        return top
    if top != "scaling":
        return None
    parts = name.split(".")
    if len(parts) == 1:
        return "scaling"
    if f"scaling.{parts[1]}" in modules:
        return parts[1]
    return "scaling"  # a name defined in scaling/__init__.py (``from scaling import __version__``)


def _from_prefix(node: ast.ImportFrom, module: str, is_pkg: bool) -> str:
    """The module a ``from ... import`` reads from; a relative one resolved against ``module``'s package."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_pkg else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def find_cycle(graph: dict[str, set[str]]) -> Optional[list[str]]:
    """One cycle of ``graph`` (its nodes, the first repeated last), or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> Optional[list[str]]:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt, path + [node])
            if found:
                return found
        done.add(node)
        return None

    return next((c for c in (visit(n, []) for n in sorted(graph)) if c), None)


def import_edges() -> list[Edge]:
    modules = _modules()
    edges = []
    for module, path in modules.items():
        source = package_of_path(str(path.relative_to(ROOT)))
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                prefix = _from_prefix(node, module, is_pkg)
                # ``from scaling import fitting`` imports the package fitting, not scaling
                names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]
            for name in names:
                target = _target(name, modules)
                if target is not None and target != source:
                    edges.append(Edge(source, target, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return edges


def packages_in_tree() -> set[str]:
    return {package_of_path(str(p.relative_to(ROOT))) for p in SRC.rglob("*.py")}


def test_every_package_has_a_row_and_every_row_a_package() -> None:
    table, tree = set(read_table()), packages_in_tree()
    assert not tree - table, f"packages missing from the table in {DOC.name}: {sorted(tree - table)}"
    assert not table - tree, f"rows of {DOC.name} for packages that do not exist: {sorted(table - tree)}"


def test_the_table_only_points_down() -> None:
    table = read_table()
    for package, row in table.items():
        for target in row.allowed or ():
            if target in HEAVY:
                continue
            assert target in table, f"{package}'s row names {target!r}, which has no row"
            assert table[target].layer < row.layer, (
                f"{package} (layer {row.layer}) may import {target} (layer {table[target].layer}): an upward arrow")


def test_every_import_is_allowed_by_the_table() -> None:
    table = read_table()
    bad = []
    for e in import_edges():
        row = table.get(e.source)
        if row is None or row.allowed is None:
            continue  # a missing row fails the test above; "everything" allows all
        if e.target not in row.allowed:
            bad.append(f"{e.where}: {e.source} imports {e.target}, which its row does not allow")
        elif e.target not in HEAVY and e.target in table and table[e.target].layer >= row.layer:
            bad.append(f"{e.where}: {e.source} imports {e.target}, a layer not below its own")
    assert not bad, "\n".join(bad)


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for e in import_edges():
        if e.target not in HEAVY:
            graph.setdefault(e.source, set()).add(e.target)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle or [])


def test_the_checker_sees_imports_of_every_kind(tmp_path: Path) -> None:
    """The parser itself: plain, from, relative and lazy imports inside functions are all edges."""
    edges = import_edges()
    seen = {(e.source, e.target) for e in edges}
    # known imports of each kind in the tree (lazy: inside functions)
    assert ("reports", "fitting") in seen and ("cli", "orchestrator") in seen and ("trainer", "torch") in seen
    assert any(e.source == "cli" and e.target == "reports" for e in edges)  # lazy, inside a command


# -- modules, not only packages --------------------------------------------------------------
def module_imports() -> list[tuple[str, str, str, str]]:
    """(importing module, imported module, imported name or '', path:line) for every import of a
    scaling module, lazy and type-only ones included."""
    modules = _modules()
    out = []
    for module, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                for a in node.names:
                    target = _owning_module(a.name, modules)
                    if target and target != module:
                        out.append((module, target, "", where))
            elif isinstance(node, ast.ImportFrom):
                prefix = _from_prefix(node, module, is_pkg)
                for a in node.names:
                    full = f"{prefix}.{a.name}"
                    target = full if full in modules else _owning_module(prefix, modules)
                    if target and target != module:
                        out.append((module, target, "" if full in modules else a.name, where))
    return out


def _owning_module(name: str, modules: dict[str, Path]) -> Optional[str]:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def test_no_import_cycle_between_modules() -> None:
    """No module imports (directly or not, lazily or not) one that imports it back."""
    graph: dict[str, set[str]] = {}
    for source, target, _, _ in module_imports():
        graph.setdefault(source, set()).add(target)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between modules: " + " -> ".join(cycle or [])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_attribute_uses() -> list[str]:
    """``alias._name`` where ``alias`` is one of our modules imported under that name."""
    modules = _modules()
    out = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in modules})
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                                if f"{node.module}.{a.name}" in modules})
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and aliases[node.value.id] != module and _private(node.attr)):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {module} uses {aliases[node.value.id]}.{node.attr}")
    return out


def test_no_private_name_is_used_outside_its_module() -> None:
    """A leading underscore means "this module's own": nothing else imports it or reads it."""
    bad = [f"{where}: {source} imports {name} from {target}" for source, target, name, where in module_imports()
           if _private(name)]
    assert not bad + private_attribute_uses(), "\n".join(bad + private_attribute_uses())
