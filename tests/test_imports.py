"""No import circle in ``src/layergeom``: the modules import each other in one direction.

Every import counts, at a module's top and inside its functions (a function-level import is a dependency all
the same, only a later one). An import names a module: ``layergeom.a.b`` absolute or relative; ``from
layergeom.a import b`` with ``b`` a submodule is an import of ``layergeom.a.b``; a package's ``__init__.py``
is the package, and importing a module of a package the importer is not inside runs that package's
``__init__.py`` first, so it imports the package too. A circle fails, named module by module with the line of
each import; the way out is to put the shared fact (a key list, an error helper, a colour map) in the lowest
module that needs it.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest
from conftest import ROOT

SRC = ROOT / "src"


def module_names(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file of every module of `package` under `src` (a package is its __init__.py)."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known) -> list[str]:
    """The modules one import statement in `module` loads (absolute names; submodules named in a `from`)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
    return subs if len(subs) == len(node.names) else [base, *subs]


def import_graph(src: Path, package: str) -> dict[str, dict[str, str]]:
    """module -> {module it imports: where (file:line)}, within `package`, from every import in its source."""
    modules = module_names(src, package)
    graph: dict[str, dict[str, str]] = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _imported(node, module, path.name == "__init__.py", modules):
                parts = target.split(".")
                # the module and the packages above it that the importer is not inside (their __init__ runs first)
                for n in range(len(parts), 0, -1):
                    name = ".".join(parts[:n])
                    if name in modules and not (module == name or module.startswith(f"{name}.")):
                        edges.setdefault(name, f"{path.relative_to(src)}:{node.lineno}")
    return graph


def import_cycle(graph: dict[str, dict[str, str]]) -> str | None:
    """One circle of the graph as a line (``a -> b (a.py:3) -> a (b.py:7)``), or None when there is none."""
    try:
        TopologicalSorter({m: set(edges) for m, edges in graph.items()}).prepare()
    except CycleError as err:
        cycle = err.args[1][::-1]  # graphlib lists it against the arrows: b, a, b for a -> b -> a
        return cycle[0] + "".join(f" -> {b} ({graph[a][b]})" for a, b in zip(cycle, cycle[1:]))
    return None


def test_layergeom_has_no_import_cycle():
    graph = import_graph(SRC, "layergeom")
    assert len(graph) > 50 and "layergeom.spectral.settings" in graph["layergeom.jobsettings"]  # it reads the tree
    cycle = import_cycle(graph)
    assert cycle is None, f"import circle: {cycle}"


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_circle_through_a_function_level_import_fails_and_is_named(tmp_path):
    src = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "import json\n\n\ndef f():\n    from .high import g\n    return g\n",
        "pkg/high.py": "from pkg.low import f\n",
    })  # fmt: skip
    graph = import_graph(src, "pkg")
    assert graph == {"pkg": {}, "pkg.low": {"pkg.high": "pkg/low.py:5"}, "pkg.high": {"pkg.low": "pkg/high.py:1"}}
    assert import_cycle(graph) in (
        "pkg.low -> pkg.high (pkg/low.py:5) -> pkg.low (pkg/high.py:1)",
        "pkg.high -> pkg.low (pkg/high.py:1) -> pkg.high (pkg/low.py:5)",
    )
    (src / "pkg" / "low.py").write_text("import json\n")
    assert import_cycle(import_graph(src, "pkg")) is None


def test_submodules_named_in_a_from_import_and_package_inits_are_edges(tmp_path):
    """`from . import b` is an import of the submodule b; `from ..sub import x` in a package's __init__ resolves
    from the package itself; importing sub.mod from outside sub runs sub/__init__.py, which may close a circle."""
    src = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from . import b\nfrom .b import NAME\n",
        "pkg/b.py": "NAME = 1\n",
        "pkg/sub/__init__.py": "from .mod import X\nfrom ..c import Y\n",
        "pkg/sub/mod.py": "from . import other\nX = 1\n",
        "pkg/sub/other.py": "",
        "pkg/c.py": "Y = 2\n",
    })  # fmt: skip
    graph = import_graph(src, "pkg")
    assert set(graph["pkg.a"]) == {"pkg.b"}
    assert set(graph["pkg.sub"]) == {"pkg.sub.mod", "pkg.c"}
    assert set(graph["pkg.sub.mod"]) == {"pkg.sub.other"}  # its own package's __init__ is not an edge
    assert import_cycle(graph) is None
    (src / "pkg" / "c.py").write_text("Y = 2\n\n\ndef f():\n    import pkg.sub.other\n")
    graph = import_graph(src, "pkg")
    assert set(graph["pkg.c"]) == {"pkg.sub", "pkg.sub.other"}  # the package's __init__ imports pkg.c back
    assert "pkg.sub -> pkg.c" in import_cycle(graph) or "pkg.c -> pkg.sub" in import_cycle(graph)


@pytest.mark.parametrize(
    ("module", "is_package", "source", "expected"),
    [
        ("layergeom.spectral.pipeline", False, "from ..config import x", ["layergeom.config"]),
        ("layergeom.spectral", True, "from .settings import x", ["layergeom.spectral.settings"]),
        ("layergeom.spectral", True, "from .. import names", ["layergeom.names"]),
        ("layergeom.plots.spectral", False, "from . import common", ["layergeom.plots.common"]),
        ("layergeom.io", False, "import layergeom.spectral.settings as s", ["layergeom.spectral.settings"]),
        ("layergeom.io", False, "from layergeom import fetch, x", ["layergeom", "layergeom.fetch"]),
    ],
)
def test_an_import_resolves_to_the_module_it_loads(module, is_package, source, expected):
    known = {"layergeom", "layergeom.config", "layergeom.spectral.settings", "layergeom.names",
             "layergeom.plots.common", "layergeom.fetch"}  # fmt: skip
    assert _imported(ast.parse(source).body[0], module, is_package, known) == expected
