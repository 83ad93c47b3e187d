"""The modules of ``layergeom.spectral`` import each other at their top, in one direction (no import loop kept
alive by imports inside functions).

The rule: an import inside a function of ``src/layergeom/spectral`` is allowed only for a heavy dependency that
the module itself does not load at its top — torch (or transformers), or a layergeom module that imports torch
at its top (``models``, ``spectral.jacobians``, ``spectral.cumulative``). The table stages compute through torch
on their job's device (``cumulative`` loads it at its top); the trends job, which only reads tables, never does.
Anything else goes to the top of the module; a cycle that would need it is a design error.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

SRC = ROOT / "src" / "layergeom"
SPECTRAL = sorted((SRC / "spectral").rglob("*.py"))  # with the stages' jobs (spectral/jobs/)
HEAVY = ("torch", "transformers")


def _top_imports(tree: ast.Module) -> list[ast.stmt]:
    return [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]


def _targets(node: ast.stmt, module: str) -> list[str]:
    """The absolute module names an import statement in `module` (dotted) loads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level == 0:
        return [node.module]
    base = module.split(".")[: -node.level]
    if node.module:
        return [".".join([*base, node.module])]
    return [".".join([*base, a.name]) for a in node.names]  # from . import jacobians


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC.parent).with_suffix("").parts)


def _top_loads_torch(text: str, module: str) -> bool:
    tree = ast.parse(text)
    return any(t.split(".")[0] in HEAVY for n in _top_imports(tree) for t in _targets(n, module))


def _loads_torch_at_top(module: str) -> bool:
    path = SRC.parent.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return path.is_file() and _top_loads_torch(path.read_text(), module)


def function_imports(text: str, module: str) -> list[tuple[str, int, str]]:
    """(function, line, imported module) of every import inside a function of the source `text`."""
    out = []
    for fn in ast.walk(ast.parse(text)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    out += [(fn.name, node.lineno, t) for t in _targets(node, module)]
    return out


def rule_breaches(text: str, module: str) -> list[str]:
    """Every import inside a function of `module` (source `text`) that breaks the rule, as a line."""
    own_torch = _top_loads_torch(text, module)
    bad = []
    for fn, line, target in function_imports(text, module):
        heavy = target.split(".")[0] in HEAVY or (target.startswith("layergeom.") and _loads_torch_at_top(target))
        if not heavy:
            bad.append(f"{module}:{line} {fn}() imports {target} (not a heavy dependency: import it at the top)")
        elif own_torch:
            bad.append(f"{module}:{line} {fn}() imports {target}, but {module} loads torch at its top already")
    return bad


@pytest.mark.parametrize("path", SPECTRAL, ids=lambda p: str(p.relative_to(SRC / "spectral")))
def test_no_function_level_import_but_for_heavy_dependencies(path):
    assert rule_breaches(path.read_text(), _module_name(path)) == []


def test_the_rule_catches_a_cycle_dodge_and_a_needless_lazy_import():
    """The check fails on what it is meant to catch: a lazy import of a light sibling, and a lazy import of a
    heavy one in a module that loads torch anyway; it lets lazy heavy imports in a torch-free module pass."""
    sources = {
        "dodge": "import numpy\n\ndef f():\n    from .intervals import replicates\n",
        "needless": "import torch\n\ndef f():\n    from . import jacobians\n",
        "fine": "import numpy\n\ndef f():\n    import torch\n    from ..models import weights_sha256\n"
        "    from . import jacobians as jac\n",
    }
    for kind, text in sources.items():
        found = rule_breaches(text, "layergeom.spectral.probe")
        assert bool(found) == (kind != "fine"), (kind, found)


def test_the_trends_module_imports_without_torch():
    code = (
        "import sys\n"
        "import layergeom.spectral.trends, layergeom.spectral.settings\n"
        "assert 'torch' not in sys.modules, 'the trends module loaded torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(SRC.parent)})


@pytest.mark.parametrize("name", [_module_name(p) for p in SPECTRAL if p.stem != "__init__"])
def test_every_spectral_module_imports_alone(name):
    importlib.import_module(name)
