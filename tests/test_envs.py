"""The conda environments (`envs/*.yaml`) against the code that runs in them and against pyproject.toml.

With `--sdm conda` every job runs its script in its rule's env, so a package that the script can import but
that the env does not list is an ImportError on the cluster, and never in the venv where the tests run.
The rules (and their envs and scripts) come from the workflow itself; the imports from `ast`: the script's
own, then those of every layergeom function, class and module-level statement it can reach by name,
transitively, imports inside function bodies included (a lazy `import torch` in a function the script calls
counts; one in a function nothing calls does not). Import names map to distributions through the installed
packages' metadata (yaml -> PyYAML, PIL -> pillow, ...).
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
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

pytest.register_assert_rewrite("lg_runs")
from lg_runs import TEST_CONFIG_FILE, RuleInfo, workflow_rules  # noqa: E402

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11 (tomllib)")

SRC = ROOT / "src"
PACKAGE = "layergeom"
# conda-forge names whose PyPI distribution is named differently
CONDA_TO_PYPI = {"python-igraph": "igraph", "matplotlib-base": "matplotlib", "pytorch": "torch"}
NOT_PACKAGES = {"python", "pip"}  # the interpreter and the installer, not dependencies
# import names that no installed distribution declares (an env may still provide them)
IMPORT_TO_DIST = {"sklearn": "scikit-learn", "yaml": "pyyaml", "PIL": "pillow", "igraph": "igraph"}


# ---- the workflow's rules ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rules(tmp_path_factory) -> tuple[RuleInfo, ...]:
    """The rules as the test config has them, and again with `conda_torch: cuda` (the model rules' CUDA env)."""
    cfg = yaml.safe_load(TEST_CONFIG_FILE.read_text())
    cuda = tmp_path_factory.mktemp("cuda") / "config.yaml"
    cuda.write_text(yaml.safe_dump({**cfg, "conda_torch": "cuda"}))
    return workflow_rules() + workflow_rules(cuda)


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
                    r = Requirement(re.sub(r"\s--hash=\S+", "", line))  # `pkg==v ; marker --hash=sha256:...`
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
def _in_sys_modules_test(test: ast.AST, top: str) -> str | None:
    """'in' / 'not in' when `test` is `"<top>" in sys.modules` / `"<top>" not in sys.modules`."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.left, ast.Constant)
        and test.left.value == top
        and ast.unparse(test.comparators[0]) == "sys.modules"
    ):
        return "in" if isinstance(test.ops[0], ast.In) else "not in" if isinstance(test.ops[0], ast.NotIn) else None
    return None


def _guarded(node: ast.Import | ast.ImportFrom, parents: dict[ast.AST, ast.AST]) -> bool:
    """An optional import: inside `try: ... except ImportError`, `if TYPE_CHECKING:` or
    `if "<pkg>" in sys.modules:`, or after `if "<pkg>" not in sys.modules: return` in its function
    (runtime.set_determinism seeds torch only in jobs that imported it already)."""
    top = (node.names[0].name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
    child, p = node, parents.get(node)
    while p is not None:
        if isinstance(p, ast.Try) and child in p.body:
            for h in p.handlers:  # only an explicit ImportError handler makes an import optional
                types = ast.walk(h.type) if h.type else ()
                names = {n.id if isinstance(n, ast.Name) else getattr(n, "attr", "") for n in types}
                if names & {"ImportError", "ModuleNotFoundError"}:
                    return True
        if isinstance(p, ast.If) and child in p.body:
            if "TYPE_CHECKING" in ast.unparse(p.test) or _in_sys_modules_test(p.test, top) == "in":
                return True
        if isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef) and child in p.body:
            for stmt in p.body[: p.body.index(child)]:
                if (
                    isinstance(stmt, ast.If)
                    and _in_sys_modules_test(stmt.test, top) == "not in"
                    and isinstance(stmt.body[-1], ast.Return | ast.Raise)
                ):
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


@dataclass
class Module:
    """One parsed file: its top-level defs, its module-level import aliases and its module-level code."""

    name: str  # dotted name; a script's file name
    path: Path
    is_pkg: bool
    tree: ast.Module
    parents: dict
    defs: dict  # top-level function/class name -> node
    aliases: dict  # module-level local name -> target (see _targets)


def _targets(node: ast.Import | ast.ImportFrom, mod: Module) -> list[tuple[str, str, str | None, str]]:
    """(local name, module, attribute or None, top-level import name) for each name an import binds."""
    out = []
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.asname:
                out.append((a.asname, a.name, None, a.name.split(".")[0]))
            else:  # `import a.b` binds `a` and imports a and a.b
                out.append((a.name.split(".")[0], a.name, None, a.name.split(".")[0]))
        return out
    if node.level:  # relative: resolve against the module's package
        pkg = mod.name.split(".") if mod.is_pkg else mod.name.split(".")[:-1]
        base = ".".join(pkg[: len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    for a in node.names:
        sub = f"{base}.{a.name}"
        if base.split(".")[0] == PACKAGE and _module_file(sub):
            out.append((a.asname or a.name, sub, None, PACKAGE))  # `from pkg import submodule`
        else:
            out.append((a.asname or a.name, base, a.name, base.split(".")[0]))
    return out


def _executed(nodes, skip_functions: bool):
    """Nodes that run when `nodes` run: function bodies are skipped at module level (they run when called)."""
    stack = list(nodes)
    while stack:
        n = stack.pop()
        yield n
        if skip_functions and isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack += [*getattr(n, "decorator_list", []), *n.args.defaults, *[d for d in n.args.kw_defaults if d]]
            continue
        stack += list(ast.iter_child_nodes(n))


class ImportScan:
    """Third-party imports a script can execute: its own code, then every layergeom function, class and
    module-level statement reachable from it by name (calls, attribute access on imported modules, classes
    with all their methods), following imports inside function bodies too. Imports under
    `try/except ImportError` or `if TYPE_CHECKING:` are optional and not counted."""

    def __init__(self, script: Path):
        self.found: dict[str, list[str]] = {}
        self.unresolved: list[str] = []
        self._mods: dict[str, Module] = {}
        self._done: set[tuple[str, str | None]] = set()
        root = self._parse(script.stem, script, is_pkg=False)
        self._todo: list[tuple[Module, list[ast.AST], bool]] = [(root, list(root.tree.body), True)]
        while self._todo:
            self._run(*self._todo.pop())

    def _parse(self, name: str, path: Path, is_pkg: bool) -> Module:
        tree = ast.parse(path.read_text(), filename=str(path))
        parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
        mod = Module(name, path, is_pkg, tree, parents, defs, {})
        for n in _executed(tree.body, skip_functions=True):
            if isinstance(n, ast.Import | ast.ImportFrom) and not _guarded(n, parents):
                for local, target, attr, _ in _targets(n, mod):
                    mod.aliases[local] = (target, attr)
        return mod

    def _module(self, name: str) -> Module | None:
        if name not in self._mods:
            f = _module_file(name)
            self._mods[name] = self._parse(name, f, f.name == "__init__.py") if f else None
        return self._mods[name]

    def _reach(self, module: str, attr: str | None, where: str):
        """Importing `module` (and its parent packages) runs their module-level code; then `attr` if given."""
        if module.split(".")[0] != PACKAGE:
            return
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            mod = self._module(name)
            if mod is None:
                self.unresolved.append(f"{where} imports {module}")
                return
            if (name, None) not in self._done:
                self._done.add((name, None))
                self._todo.append((mod, list(mod.tree.body), True))
        if attr is not None:
            self._symbol(self._mods[module], attr, where)

    def _symbol(self, mod: Module, name: str, where: str):
        if (mod.name, name) in self._done:
            return
        self._done.add((mod.name, name))
        if name in mod.defs:
            self._todo.append((mod, [mod.defs[name]], False))
        elif name in mod.aliases:  # a re-export
            self._reach(*mod.aliases[name], where)

    def _run(self, mod: Module, nodes: list[ast.AST], module_level: bool):
        def where(n):
            return f"{mod.path.relative_to(ROOT)}:{getattr(n, 'lineno', '?')}"

        executed = list(_executed(nodes, skip_functions=module_level))
        aliases = dict(mod.aliases)
        for n in executed:  # imports first: they bind names used below
            if isinstance(n, ast.Import | ast.ImportFrom) and not _guarded(n, mod.parents):
                for localname, target, attr, top in _targets(n, mod):
                    aliases[localname] = (target, attr)
                    if top == PACKAGE:
                        self._reach(target, attr, where(n))
                    elif top and top not in sys.stdlib_module_names and top != "__future__":
                        self.found.setdefault(top, []).append(where(n))
        for n in executed:
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                self._use(mod, aliases, n.id, None, where(n))
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                self._use(mod, aliases, n.value.id, n.attr, where(n))

    def _use(self, mod: Module, aliases: dict, name: str, attr: str | None, where: str):
        if name in aliases:
            target, a = aliases[name]
            if a is None and attr is not None and target.split(".")[0] == PACKAGE:
                sub = f"{target}.{attr}"
                self._reach(sub, None, where) if _module_file(sub) else self._reach(target, attr, where)
            else:
                self._reach(target, a, where)
        elif name in mod.defs:
            self._symbol(mod, name, where)


def third_party_imports(script: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Top-level third-party import name -> where it is imported, over everything the script can run;
    and layergeom modules it names that do not exist."""
    scan = ImportScan(script)
    return scan.found, scan.unresolved


@cache
def _packages_distributions() -> dict[str, list[str]]:
    return md.packages_distributions()


def distribution_of(import_name: str) -> str:
    if import_name in IMPORT_TO_DIST:
        return canonicalize_name(IMPORT_TO_DIST[import_name])
    dists = _packages_distributions().get(import_name)
    return canonicalize_name(dists[0]) if dists else canonicalize_name(import_name)


# ---- the tests --------------------------------------------------------------------------------------
@pytest.mark.dag
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
    problems += [
        f"{e.relative_to(ROOT)} is used by no rule" for e in sorted((ROOT / "envs").glob("*.yaml")) if e not in used
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.dag
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


@pytest.mark.dag
def test_envs_agree_with_pyproject(rules):
    """Every package an env's rules import is a pyproject dependency, and no version bound of an env contradicts
    pyproject's: a version an env names and allows is allowed by pyproject, and a lower bound of pyproject is
    allowed by every env that does not pin an exact version. (The envs list their whole locked closure, so a
    package pyproject does not name is a dependency of one it does; tests/test_lock.py checks that closure.)"""
    deps = pyproject_requirements()
    problems = []
    for env in sorted({r.env for r in rules if r.env and r.env.is_file()}):
        for name, req in env_requirements(env).items():
            if name not in deps:
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
    for r in rules:
        if r.script is None or r.env is None or not r.env.is_file() or r.script.suffix != ".py":
            continue
        for name in third_party_imports(r.script)[0]:
            if distribution_of(name) not in deps:
                problems.append(f"rule {r.name} imports {name}, which pyproject.toml does not list")
    assert not problems, "\n".join(sorted(set(problems)))


def test_import_scan_sees_through_layergeom_modules():
    """The scan follows layergeom imports into function bodies (torch inside runtime.set_determinism)."""
    imports, unresolved = third_party_imports(ROOT / "scripts" / "activations.py")
    assert not unresolved
    assert "torch" in imports and any("runtime.py" in w for w in imports["torch"])
