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
    ("cli",),
)
# The package's own __init__ is the public facade: it may import every layer but cli.
FACADE_RANK = len(LAYERS) - 1.5


def rank_of(module: str) -> float:
    """The layer of ``effdepth.X.Y`` (by its first component); entry points (__main__) are cli."""
    parts = module.split(".")[1:]
    if not parts:
        return FACADE_RANK
    if parts[-1] == "__main__":
        return len(LAYERS) - 1
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


def imported_modules(path: Path) -> set:
    """Every effdepth module ``path`` imports, at module level or inside functions."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "effdepth"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "effdepth":
                continue
            # ``from . import content`` names a module; ``from .x import f`` names x.
            if node.module:
                found.add(target)
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if (PACKAGE.parent / Path(*candidate.split("."))).with_suffix(".py").exists() or (
                    PACKAGE.parent / Path(*candidate.split("."))
                ).is_dir():
                    found.add(candidate)
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
        and not module_name(p).endswith("__main__")
        and any(t.startswith("effdepth.cli") for t in imported_modules(p))
    ]
    assert users == []


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
    assert len(entries) <= 12, entries
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert not packages & set(effdepth.__all__), "a public name hides a subpackage"
