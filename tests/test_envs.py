"""The conda environments (`envs/*.yaml`) against the code that runs in them and against pyproject.toml.

With `--sdm conda` every job runs its script in its rule's env, so a package that a script imports (directly
or through the layergeom modules it imports, transitively, function-level imports included) but that the env
does not list is an ImportError on the cluster, and never in the venv where the tests run. These tests read
the rules from the workflow itself, the imports with `ast`, and map import names to distributions with the
installed packages' metadata (yaml -> PyYAML, PIL -> pillow, ...).
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

SRC = ROOT / "src"
PACKAGE = "layergeom"
# conda-forge names whose PyPI distribution is named differently
CONDA_TO_PYPI = {"python-igraph": "igraph", "matplotlib-base": "matplotlib", "pytorch": "torch"}
NOT_PACKAGES = {"python", "pip"}  # the interpreter and the installer, not dependencies
# import names that no installed distribution declares (an env may still provide them)
IMPORT_TO_DIST = {"sklearn": "scikit-learn", "yaml": "pyyaml", "PIL": "pillow", "igraph": "igraph"}


# ---- the workflow's rules ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RuleInfo:
    name: str
    env: Path | None
    script: Path | None
    local: bool


@pytest.fixture(scope="module")
def rules() -> list[RuleInfo]:
    """Every rule of the workflow (test config), with its conda env and script resolved to absolute paths."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings

    with SnakemakeApi(OutputSettings(quiet=True)) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(configfiles=[ROOT / "config" / "test.yaml"]),
            storage_settings=StorageSettings(),
            snakefile=ROOT / "Snakefile",
        )._workflow  # the parsed workflow: the public API has no rule listing
        out = []
        for r in wf.rules:
            base = Path(r.snakefile).parent
            out.append(
                RuleInfo(
                    r.name,
                    (base / r.conda_env).resolve() if r.conda_env else None,
                    (base / r.script).resolve() if r.script else None,
                    wf.is_local(r),
                )
            )
    assert out, "the workflow has no rules"
    return out


# ---- environments -----------------------------------------------------------------------------------
def _conda_requirement(spec: str) -> Requirement:
    """A conda MatchSpec (`numpy >=2`, `python =3.11`, `igraph 0.11.*`) as a PEP 508 requirement."""
    m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*", spec.split("::")[-1])
    name, ver = m.group(1), m.group(2).replace(" ", "")
    name = CONDA_TO_PYPI.get(name.lower(), name)
    if re.fullmatch(r"=[^=].*", ver):  # conda's fuzzy `=1.2` means 1.2.*
        ver = "==" + ver[1:] + ("" if ver.endswith("*") else ".*")
    elif re.fullmatch(r"[0-9][^,<>=!]*", ver):  # bare version
        ver = "==" + ver
    return Requirement(f"{name}{ver}")


@cache
def env_requirements(path: Path) -> dict[str, Requirement]:
    """Canonical distribution name -> requirement, over the env's conda and pip dependencies."""
    spec = yaml.safe_load(path.read_text())
    reqs: dict[str, Requirement] = {}
    for dep in spec.get("dependencies") or []:
        if isinstance(dep, dict):
            for line in dep.get("pip", []):
                if not line.strip().startswith("-"):  # --extra-index-url and other pip options
                    r = Requirement(line)
                    reqs[canonicalize_name(r.name)] = r
        else:
            r = _conda_requirement(str(dep))
            reqs[canonicalize_name(r.name)] = r
    return {n: r for n, r in reqs.items() if n not in NOT_PACKAGES}


@cache
def pyproject_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {canonicalize_name(Requirement(d).name): Requirement(d) for d in project["dependencies"]}


# ---- imports ----------------------------------------------------------------------------------------
def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside `try: ... except ImportError` (an optional import) or `if TYPE_CHECKING:`."""
    child, p = node, parents.get(node)
    while p is not None:
        if isinstance(p, ast.Try) and child in p.body:
            for h in p.handlers:
                names = {n.id if isinstance(n, ast.Name) else getattr(n, "attr", "") for n in ast.walk(h.type or p)}
                if h.type is None or names & {"ImportError", "ModuleNotFoundError", "Exception"}:
                    return True
        if isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test) and child in p.body:
            return True
        child, p = p, parents.get(p)
    return False


def _module_file(name: str) -> Path | None:
    """src/ path of a layergeom module (package -> its __init__.py)."""
    base = SRC.joinpath(*name.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@cache
def direct_imports(path: Path) -> tuple[tuple[str, int], ...]:
    """Absolute dotted names imported anywhere in a file (function bodies included), with line numbers."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    is_pkg = path.name == "__init__.py"
    here = _module_name(path) if path.is_relative_to(SRC) else ""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or _guarded(node, parents):
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
            continue
        if node.level:  # relative: resolve against this module's package
            pkg = here.split(".") if is_pkg else here.split(".")[:-1]
            base = ".".join(pkg[: len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
        else:
            base = node.module
        if base == "__future__":
            continue
        out.append((base, node.lineno))
        # `from pkg import sub` imports the submodule when there is one
        out += [(f"{base}.{a.name}", node.lineno) for a in node.names if _module_file(f"{base}.{a.name}")]
    return tuple(out)


def third_party_imports(script: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Top-level third-party import name -> where it is imported, over the script and every layergeom
    module it reaches (a module also runs its parent packages' __init__); and unresolvable layergeom names."""
    found: dict[str, list[str]] = {}
    unresolved: list[str] = []
    todo, seen = [script], set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        where = f.relative_to(ROOT)
        for name, line in direct_imports(f):
            top = name.split(".")[0]
            if top == PACKAGE:
                parts = name.split(".")
                for i in range(1, len(parts) + 1):
                    mf = _module_file(".".join(parts[:i]))
                    if mf is not None:
                        todo.append(mf)
                    elif i == len(parts) and _module_file(".".join(parts[:-1])) is None:
                        unresolved.append(f"{where}:{line} imports {name}")
            elif top not in sys.stdlib_module_names:
                found.setdefault(top, []).append(f"{where}:{line}")
    return found, unresolved


@cache
def _packages_distributions() -> dict[str, list[str]]:
    return md.packages_distributions()


def distribution_of(import_name: str) -> str:
    if import_name in IMPORT_TO_DIST:
        return canonicalize_name(IMPORT_TO_DIST[import_name])
    dists = _packages_distributions().get(import_name)
    return canonicalize_name(dists[0]) if dists else canonicalize_name(import_name)


# ---- the tests --------------------------------------------------------------------------------------
def test_every_rule_names_an_existing_env(rules):
    problems = []
    for r in rules:
        if r.script is not None and r.env is None:
            problems.append(f"rule {r.name}: runs {r.script.name} but has no `conda:` env")
        if r.env is not None:
            if not r.env.is_file():
                problems.append(f"rule {r.name}: conda env {r.env} does not exist")
                continue
            spec = yaml.safe_load(r.env.read_text())
            if not spec.get("channels") or not spec.get("dependencies"):
                problems.append(f"rule {r.name}: {r.env.name} needs `channels:` and `dependencies:`")
            elif "python" not in {str(d).split()[0] for d in spec["dependencies"] if isinstance(d, str)}:
                problems.append(f"{r.env.name}: pin `python` (Snakemake's script preamble runs under it)")
        if r.script is not None and not r.script.is_file():
            problems.append(f"rule {r.name}: script {r.script} does not exist")
    used = {r.env for r in rules if r.env}
    problems += [f"{e.relative_to(ROOT)} is used by no rule" for e in sorted((ROOT / "envs").glob("*.yaml")) if e not in used]
    assert not problems, "\n".join(problems)


def test_script_imports_are_provided_by_the_rule_env(rules):
    """Each rule's env lists (by name) every distribution its script's import closure needs."""
    problems = []
    checked = 0
    for r in rules:
        if r.script is None or r.env is None or not r.env.is_file() or r.script.suffix != ".py":
            continue
        imports, unresolved = third_party_imports(r.script)
        problems += [f"rule {r.name}: {u}: no such layergeom module" for u in unresolved]
        listed = env_requirements(r.env)
        for name, where in sorted(imports.items()):
            dist = distribution_of(name)
            checked += 1
            if dist not in listed:
                problems.append(
                    f"rule {r.name} ({r.script.name}) runs in {r.env.name}, which lacks `{dist}` "
                    f"(import {name} at {', '.join(sorted(set(where))[:3])}{' ...' if len(set(where)) > 3 else ''})"
                )
    assert checked, "no third-party import found at all: the import scan is broken"
    assert not problems, "\n".join(sorted(set(problems)))


def _allowed(spec: SpecifierSet, v: Version) -> bool:
    return spec.contains(v, prereleases=True)


def test_envs_agree_with_pyproject(rules):
    """Every env package is a pyproject dependency, and no version bound of an env contradicts pyproject's:
    a version an env names and allows is allowed by pyproject, and a lower bound of pyproject is allowed by
    every env that does not pin an exact version."""
    deps = pyproject_requirements()
    problems = []
    for env in sorted({r.env for r in rules if r.env and r.env.is_file()}):
        for name, req in env_requirements(env).items():
            if name not in deps:
                problems.append(f"{env.name}: `{req}` is not a dependency in pyproject.toml")
                continue
            ours, theirs = req.specifier, deps[name].specifier
            for s in ours:
                v = Version(s.version.rstrip(".*"))
                if s.operator in (">=", "==", "~=", "<=") and _allowed(ours, v) and not _allowed(theirs, v):
                    problems.append(f"{env.name}: `{req}` allows {v}, pyproject.toml says `{deps[name]}`")
            pinned = any(s.operator in ("==", "===") for s in ours)
            for s in theirs:
                if s.operator == ">=" and not pinned and ours and not _allowed(ours, Version(s.version)):
                    problems.append(f"{env.name}: `{req}` excludes {s.version}, pyproject.toml says `{deps[name]}`")
    assert not problems, "\n".join(problems)


def test_import_scan_sees_through_layergeom_modules():
    """The scan follows layergeom imports into function bodies (torch inside runtime.set_determinism)."""
    imports, unresolved = third_party_imports(ROOT / "scripts" / "activations.py")
    assert not unresolved
    assert "torch" in imports and any("runtime.py" in w for w in imports["torch"])
