"""The package's imports only point down the declared layers (docs/design.md, "Layout")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import effdepth

PACKAGE = Path(effdepth.__file__).parent

# Lowest first. A module may import its own layer and the layers below it,
# never one above. Entries name a module or a package (all it holds).
LAYERS = (
    ("errors",),
    ("numerics",),
    ("results",),
    ("data",),
    ("models",),
    ("options",),
    ("measurement",),
    ("report",),
    ("studies",),
    ("scale",),
    ("integrations",),
    ("cli",),
)
# The package's own __init__ is the public facade: it may import every layer but cli.
FACADE_RANK = len(LAYERS) - 1.5


def rank_of(module: str) -> float:
    """The layer of ``effdepth.X.Y`` (by its first component); an entry point (__main__) is in its package's."""
    parts = module.split(".")[1:]
    if not parts:
        return FACADE_RANK
    for rank, names in enumerate(LAYERS):
        if parts[0] in names:
            return rank
    raise AssertionError(f"{module} is in no declared layer: add it to LAYERS (and to docs/design.md's layout)")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_statements(path: Path):
    """``(module, names, from_module)`` for every effdepth import in ``path``, at module level or inside
    functions: the module made absolute, ``names`` None for ``import X``, ``from_module`` False for
    ``from . import x``."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((a.name, None, True) for a in node.names if a.name.split(".")[0] == "effdepth")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "effdepth":
                yield target, tuple(a.name for a in node.names), bool(node.module)


def is_module(name: str) -> bool:
    where = PACKAGE.parent / Path(*name.split("."))
    return where.with_suffix(".py").exists() or where.is_dir()


def imported_modules(path: Path) -> set:
    """Every effdepth module ``path`` imports, at module level or inside functions."""
    found = set()
    for target, names, from_module in import_statements(path):
        # ``from . import content`` names a module; ``from .x import f`` names x.
        if names is None or from_module:
            found.add(target)
        found |= {f"{target}.{n}" for n in names or () if is_module(f"{target}.{n}")}
    return found


def dependencies(path: Path) -> set:
    """The modules ``path`` depends on: the edges of the import graph (see :func:`test_no_import_circles`)."""
    found = set()
    for target, names, _ in import_statements(path):
        if names is None:  # import effdepth.a.b
            found.add(target)
        for n in names or ():  # from effdepth.a import n: the module n, or a name a defines
            found.add(f"{target}.{n}" if is_module(f"{target}.{n}") else target)
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_is_in_a_layer():
    for path in SOURCES:
        rank_of(module_name(path))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path):
    source = module_name(path)
    upward = sorted(t for t in imported_modules(path) if rank_of(t) > rank_of(source))
    assert not upward, f"{source} imports upward: {', '.join(upward)}"


def test_nothing_outside_cli_imports_cli():
    users = [
        module_name(p)
        for p in SOURCES
        if not module_name(p).startswith("effdepth.cli")
        and any(t.startswith("effdepth.cli") for t in imported_modules(p))
    ]
    assert users == []


def circles(graph: dict) -> list:
    """The import circles of ``graph`` (module -> the modules it depends on): one per strongly connected set
    of modules, as the shortest path from its first member back to it.

    >>> circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "d"}})
    [['a', 'b', 'c', 'a'], ['d', 'd']]
    """
    index, low, stack, found = {}, {}, [], []

    def connect(v):  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = set()
            while v not in members:
                members.add(stack.pop())
            if len(members) > 1 or v in graph.get(v, ()):
                found.append(shortest_circle(graph, members))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(found)


def shortest_circle(graph: dict, members: set) -> list:
    """The shortest path from the first of ``members`` back to it, within ``members`` (breadth first)."""
    start = min(members)
    paths = {w: [start, w] for w in graph[start] if w in members}
    queue = list(paths)
    while start not in paths:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return paths[start]


def import_graph() -> dict:
    return {module_name(p): dependencies(p) for p in SOURCES}


def test_no_import_circles():
    """No module depends on itself through its imports, not even through one made inside a function (which
    only defers the circle to the call).

    The graph: a node per module (a package is its ``__init__``). ``import effdepth.a.b`` is an edge to
    ``effdepth.a.b``; ``from effdepth.a import x`` (or its relative form) an edge to ``effdepth.a.x`` when that
    is a module, else to ``effdepth.a``, the module that defines or re-exports ``x``. The parent packages Python
    runs on the way to a module are not edges: a package's ``__init__`` re-exports its own submodules, and
    counting them would make every submodule that imports a sibling a circle. So a submodule importing a
    sibling module directly is no circle, while one importing a name from its own package's ``__init__``,
    which imports it back, is.
    """
    found = [" -> ".join(c) for c in circles(import_graph())]
    assert not found, "import circles: " + "; ".join(found)


def test_the_circle_check_sees_a_made_up_circle():
    """The check itself must be able to fail: two probes importing each other, one inside a function."""
    probes = [PACKAGE / "numerics" / "_circle_probe_a.py", PACKAGE / "numerics" / "_circle_probe_b.py"]
    probes[0].write_text("from effdepth.numerics import _circle_probe_b\n", encoding="utf-8")
    probes[1].write_text("def f():\n    from ._circle_probe_a import g\n", encoding="utf-8")
    try:
        graph = {**import_graph(), **{module_name(p): dependencies(p) for p in probes}}
        assert [*(module_name(p) for p in probes), module_name(probes[0])] in circles(graph)
    finally:
        for probe in probes:
            probe.unlink()


def test_the_walker_sees_function_level_and_relative_imports(tmp_path):
    """The check itself must be able to fail."""
    fake = PACKAGE / "numerics" / "_layer_probe.py"
    fake.write_text("def f():\n    from ..report import figures\n    from ..cli import main\n", encoding="utf-8")
    try:
        assert {"effdepth.report", "effdepth.report.figures", "effdepth.cli"} <= imported_modules(fake)
        assert rank_of("effdepth.report.figures") > rank_of(module_name(fake))
    finally:
        fake.unlink()


def test_the_design_layout_names_every_module():
    design = (PACKAGE.parents[1] / "docs" / "design.md").read_text(encoding="utf-8")
    layout = design[design.index("## Layout") :]
    missing = sorted(
        p.stem
        for p in SOURCES
        if p.stem not in ("__init__", "__main__") and f"{p.stem}.py" not in layout and f"{p.stem}/" not in layout
    )
    assert missing == [], f"docs/design.md's layout misses: {', '.join(missing)}"


def test_no_function_takes_more_than_ten_parameters():
    """Options travel as objects (effdepth.options), not as long parameter lists."""
    long = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                count -= bool(a.args and a.args[0].arg in ("self", "cls"))
                if count > 10:
                    long.append(f"{module_name(path)}.{node.name} ({count})")
    assert long == []


def test_few_nouns_at_the_top_and_no_name_shadows_a_subpackage():
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert len(entries) <= 13, entries
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert not packages & set(effdepth.__all__), "a public name hides a subpackage"
