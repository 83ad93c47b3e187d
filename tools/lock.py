"""The hash-locked environments, from PyPI alone (docs/cluster.md, "Locked environments").

    python tools/lock.py compile [--upgrade | --upgrade-package NAME] [--torch-cpu-wheel WHEEL ...]   # needs uv and PyPI: rewrites requirements/, envs/
    python tools/lock.py envs                                    # offline: rewrites envs/*.yaml from requirements/
    python tools/lock.py pins NAME...                            # install.sh: lock.txt's lines of these packages
    python tools/lock.py torch-args cpu|cuda                     # install.sh: pip arguments of the torch step
    python tools/lock.py check-installed cpu|cuda [--extras]     # install.sh: this interpreter's packages = the lock
    python tools/lock.py check --resolution lowest|highest [--torch-wheel WHEEL] [--record]
                                                                 # needs uv and PyPI: a venv of one end of pyproject's
                                                                 # ranges, the adapter contract and the unit tests

`compile` resolves pyproject.toml's dependencies with its extras `workflow` and `test`, plus requirements/lock.in
(the exact torch, pip, and the setuptools that builds layergeom) with UV_COMMAND below, one universal resolution
with every wheel's sha256 from PyPI, and splits it in two. It keeps every locked version that still satisfies
(uv prefers the pins of its output file, seeded with lock.txt and torch-pypi.txt): adding a dependency adds its
closure and moves nothing else; `--upgrade` resolves everything afresh.

- requirements/lock.txt: everything but torch and the packages that only PyPI's (CUDA) torch needs;
- requirements/torch-pypi.txt: PyPI's torch and that CUDA closure (nvidia-*, cuda-*, triton). On Linux this is the
  CUDA build of torch; on macOS and Windows PyPI's torch is the CPU build and the CUDA closure's markers exclude it.

requirements/torch-cpu.txt holds the CPU build of torch for Linux x86-64, which PyPI does not have (it lives on
download.pytorch.org/whl/cpu): the sha256 of the wheel files given with --torch-cpu-wheel, and nothing else (a
`compile` without them keeps the file as it is). Its dependencies are the CPU wheel's own Requires-Dist, which are
all in lock.txt.

`check` tests the ranges that pyproject.toml publishes (what `pip install -e ".[workflow,test]"` may resolve) at
their two ends, outside the lock: `--resolution lowest` resolves every direct dependency to its oldest allowed
release (uv's `lowest-direct`), `highest` everything to its newest; each builds a venv (.venvs-check/<end>) and
runs the adapter contract (tests/test_adapters.py), then the other unit tests (`-m 'not dag'`). The lowest end
fails unless each direct dependency resolves to exactly its declared lower bound (a bound that does not resolve
with the rest is not a tested version). `--record` writes the versions of a passing end, the date and the digest
of the ranges into docs/cluster.md ("Tested version ranges"), which tests/test_lock.py checks against pyproject.
`--torch-wheel` installs a local torch wheel of the resolved version (the CPU build) instead of PyPI's.

Each envs/*.yaml gets the exact closure of its roots (ENV_ROOTS) inline in `pip:`, lines copied from the lock
files with their hashes: Snakemake hashes the yaml's text, not a file it references.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQ = ROOT / "requirements"
LOCK, TORCH_PYPI, TORCH_CPU, LOCK_IN = (REQ / n for n in ("lock.txt", "torch-pypi.txt", "torch-cpu.txt", "lock.in"))
PYTHON_VERSION = "3.11"  # the oldest Python pyproject allows; `--universal` covers the newer ones too
PYPI = "https://pypi.org/simple"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
UV_COMMAND = [
    "uv", "pip", "compile", "pyproject.toml", "requirements/lock.in", "--extra", "workflow", "--extra", "test",
    "--universal", "--generate-hashes", "--python-version", PYTHON_VERSION,
    "--index-url", PYPI, "--no-config", "--no-header", "--annotation-style", "split",
]  # fmt: skip
# packages that only PyPI's CUDA build of torch pulls in (its CPU build requires none of them)
CUDA_ONLY = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")
# the conda envs: their roots, the packages their rules import (tests/test_envs.py checks they suffice)
ENV_ROOTS = {
    "hub": ["numpy", "tqdm", "huggingface-hub"],
    "plots": ["numpy", "scipy", "pandas", "matplotlib", "pyyaml", "jsonschema", "tqdm"],
    "graphs": ["numpy", "scipy", "pandas", "igraph", "leidenalg", "matplotlib", "pyyaml", "jsonschema", "tqdm"],
    "torch": ["numpy", "scipy", "pandas", "pyyaml", "jsonschema", "tqdm", "pyarrow", "torch", "transformers",
              "tokenizers", "safetensors", "accelerate", "gguf", "datasets"],
}  # fmt: skip
ENV_ROOTS["graphs-torch"] = [*ENV_ROOTS["graphs"], "torch"]  # the graph jobs: correlations in torch, then Leiden
# an env whose roots hold torch has a CPU build of it, or, its name ending in -cuda, PyPI's (CUDA) build
for _env in ("torch", "graphs-torch"):
    ENV_ROOTS[f"{_env}-cuda"] = ENV_ROOTS[_env]
# what a fresh venv brings: never uninstalled (both are locked too, so install.sh replaces them by the lock's)
VENV_SEED = {"pip", "setuptools"}


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Entry:
    """One requirement line of a lock: `name==version ; marker` with its hashes and the packages that need it."""

    name: str
    version: str
    marker: str = ""
    hashes: list[str] = field(default_factory=list)
    via: list[str] = field(default_factory=list)

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}" + (f" ; {self.marker}" if self.marker else "")

    def line(self) -> str:
        """The entry on one line, as envs/*.yaml list it."""
        return " ".join([self.requirement, *(f"--hash=sha256:{h}" for h in self.hashes)])

    def block(self) -> str:
        """The entry as a requirements file lists it (uv's layout)."""
        lines = [self.requirement, *(f"    --hash=sha256:{h}" for h in self.hashes)]
        text = " \\\n".join(lines)
        if self.via:
            text += "\n    # via\n" + "".join(f"    #   {v}\n" for v in self.via)
        return text.rstrip("\n") + "\n"


def parse_lock(text: str) -> list[Entry]:
    """Entries of a requirements file in uv's split layout (also reads one-line `req --hash=...` entries)."""
    entries: list[Entry] = []
    logical: list[str] = []
    for raw in text.splitlines():
        s = raw.strip()
        if s.startswith("#"):
            if entries and s.lstrip("# ").strip() and s != "# via":
                v = re.sub(r"^via\b", "", s[1:].strip()).strip()
                if v:
                    entries[-1].via.append(v)
            continue
        if not s or s.startswith("--") and not logical:
            continue
        logical.append(s.rstrip("\\").strip())
        if s.endswith("\\"):
            continue
        entries.append(parse_line(" ".join(logical)))
        logical = []
    return entries


def parse_line(line: str) -> Entry:
    hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
    req = re.sub(r"\s*--hash=\S+", "", line).strip()
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)\s*(?:;\s*(.*))?", req)
    if not m:
        raise ValueError(f"not an exact pin: {line[:120]}")
    return Entry(canon(m.group(1)), m.group(2), (m.group(3) or "").strip(), hashes)


def read(path: Path) -> list[Entry]:
    return parse_lock(path.read_text())


def header(path: Path) -> dict[str, str]:
    """`# key: value` lines at the top of a lock file."""
    out = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        m = re.match(r"#\s*([a-z0-9-]+):\s*(.*)", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def input_digest() -> str:
    """sha256 of what the lock is resolved from: pyproject's dependencies and extras, lock.in, the uv command."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    data = {
        "dependencies": project["dependencies"],
        "extras": {k: project["optional-dependencies"][k] for k in ("workflow", "test")},
        "lock.in": [ln.split("#")[0].strip() for ln in LOCK_IN.read_text().splitlines() if ln.split("#")[0].strip()],
        "uv": UV_COMMAND,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# ---- the dependency graph (uv's `# via` annotations) -------------------------------------------------
def children(entries: list[Entry]) -> dict[str, set[str]]:
    names = {e.name for e in entries}
    out: dict[str, set[str]] = {n: set() for n in names}
    for e in entries:
        for v in e.via:
            if canon(v) in names:
                out[canon(v)].add(e.name)
    return out


def closure(roots: list[str], kids: dict[str, set[str]], cut=lambda parent, child: False) -> set[str]:
    seen, todo = set(), [canon(r) for r in roots]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        if n not in kids:
            raise KeyError(f"{n} is not in the lock")
        seen.add(n)
        todo += [c for c in kids[n] if not cut(n, c)]
    return seen


def torch_cpu_requires() -> list[str]:
    """The CPU wheel's dependencies, as recorded in requirements/torch-cpu.txt's header."""
    return [canon(n) for n in header(TORCH_CPU)["requires"].split()]


def split_closure(entries: list[Entry]) -> set[str]:
    """Names that only PyPI's CUDA torch needs: those reachable from the roots only through torch -> CUDA_ONLY."""
    kids = children(entries)
    roots = [e.name for e in entries if any(canon(v) not in kids for v in e.via)]  # needed by an input directly
    everything = closure(roots, kids)
    without = closure(
        [r for r in roots if r != "torch"] + [c for c in kids["torch"] if not CUDA_ONLY.match(c)],
        kids,
        cut=lambda p, c: p == "torch",
    )
    cuda = everything - without - {"torch"}
    assert all(CUDA_ONLY.match(n) or any(CUDA_ONLY.match(p) for p in _parents(n, entries)) for n in cuda), cuda
    return cuda


def _parents(name: str, entries: list[Entry]) -> set[str]:
    return {canon(v) for e in entries if e.name == name for v in e.via}


# ---- compile ---------------------------------------------------------------------------------------------
def write_lock(path: Path, title: str, entries: list[Entry], extra: dict[str, str]) -> None:
    head = [f"# {title}", "# Generated by tools/lock.py (do not edit): python tools/lock.py compile"]
    head += [f"# {k}: {v}" for k, v in extra.items()]
    path.write_text("\n".join(head) + "\n" + "".join(e.block() for e in entries))


def wheel_info(path: Path) -> tuple[str, str, list[str], str]:
    """(version, python tag, Requires-Dist names without extras, sha256) of a torch wheel."""
    m = re.fullmatch(r"torch-([^-]+)-(cp\d+)-cp\d+-(manylinux_\d+_\d+_x86_64|linux_x86_64)\.whl", path.name)
    if not m:
        raise SystemExit(f"{path.name}: expected a torch CPU wheel for Linux x86-64 (torch-X+cpu-cpXY-...x86_64.whl)")
    with zipfile.ZipFile(path) as z:
        meta = z.read(f"torch-{m.group(1)}.dist-info/METADATA").decode()
    reqs = [
        canon(re.match(r"[A-Za-z0-9_.\-]+", r).group(0))
        for r in re.findall(r"^Requires-Dist:\s*(.+)$", meta, re.M)
        if "extra ==" not in r
    ]
    return m.group(1), m.group(2), reqs, hashlib.sha256(path.read_bytes()).hexdigest()


def write_torch_cpu(wheels: list[Path], torch_version: str) -> None:
    infos = [wheel_info(w) for w in wheels]
    versions = {i[0] for i in infos}
    if versions != {f"{torch_version}+cpu"}:
        raise SystemExit(f"CPU wheels are {sorted(versions)}, the lock's torch is {torch_version}")
    pys = sorted({f"{i[1][2]}.{i[1][3:]}" for i in infos})
    pythons = " or ".join(f"python_version == '{p}'" for p in pys)
    marker = "sys_platform == 'linux' and platform_machine == 'x86_64' and " + (
        pythons if len(pys) == 1 else f"({pythons})"
    )
    requires = sorted({r for i in infos for r in i[2]})
    entry = Entry("torch", f"{torch_version}+cpu", marker, sorted(i[3] for i in infos))
    write_lock(
        TORCH_CPU,
        f"torch's CPU build for Linux x86-64 (from {TORCH_CPU_INDEX}), for the Pythons whose wheel was hashed",
        [entry],
        {"wheels": " ".join(w.name for w in wheels), "index": TORCH_CPU_INDEX, "requires": " ".join(requires)},
    )


def compile_lock(uv: str, cpu_wheels: list[Path], upgrade: bool = False, upgrade_packages: list[str] = ()) -> None:
    cmd = [uv, *UV_COMMAND[1:], *(["--upgrade"] if upgrade else [])]
    cmd += [a for name in upgrade_packages for a in ("--upgrade-package", name)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "all.txt"
        if not upgrade:  # uv prefers the versions an existing output file pins
            out.write_text("".join(f.read_text() for f in (LOCK, TORCH_PYPI) if f.exists()))
        subprocess.run([*cmd, "--quiet", "-o", str(out)], cwd=ROOT, check=True)
        entries = parse_lock(out.read_text())
    for e in entries:
        e.via = [v.replace(str(ROOT) + "/", "") for v in e.via]
    torch = [e for e in entries if e.name == "torch"]
    assert len(torch) == 1 and not torch[0].marker, torch
    cuda = split_closure(entries)
    uv_version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    meta = {"command": " ".join(UV_COMMAND), "uv": uv_version, "input-sha256": input_digest()}
    base = [e for e in entries if e.name != "torch" and e.name not in cuda]
    write_lock(LOCK, "Everything layergeom[workflow,test] needs but torch, from PyPI", base, meta)
    write_lock(
        TORCH_PYPI,
        "PyPI's torch and what only it needs (Linux: the CUDA build; macOS, Windows: the CPU build)",
        [e for e in entries if e.name == "torch" or e.name in cuda],
        meta,
    )
    if cpu_wheels:
        write_torch_cpu(cpu_wheels, torch[0].version)
    missing = set(torch_cpu_requires()) - {e.name for e in base}
    if missing:
        raise SystemExit(f"the CPU torch needs {sorted(missing)}, which lock.txt lacks")
    write_envs()


# ---- envs -------------------------------------------------------------------------------------------
def torch_flavour(env: str) -> str | None:
    """The torch build of an env: None (no torch), "cuda" (PyPI's, its name ending in -cuda) or "cpu"."""
    if "torch" not in ENV_ROOTS[env]:
        return None
    return "cuda" if env.endswith("-cuda") else "cpu"


def env_entries(env: str) -> tuple[list[str], list[Entry]]:
    """(pip options, entries) of an env's `pip:` section, computed from the lock files."""
    base, pypi, cpu = read(LOCK), read(TORCH_PYPI), read(TORCH_CPU)
    roots = ENV_ROOTS[env]
    if torch_flavour(env) is None:
        return [], [e for e in base if e.name in closure(roots, children(base))]
    if torch_flavour(env) == "cuda":
        allof = base + pypi
        return [], sorted((e for e in allof if e.name in closure(roots, children(allof))), key=lambda e: e.name)
    # the CPU env: the CPU wheel on Linux x86-64, PyPI's torch (a CPU build there) on macOS and Windows
    kids = children(base)
    names = closure([r for r in roots if r != "torch"] + torch_cpu_requires(), kids)
    (pypi_torch,) = (e for e in pypi if e.name == "torch")
    mac_win = Entry(
        "torch", pypi_torch.version, "sys_platform == 'darwin' or sys_platform == 'win32'", pypi_torch.hashes
    )
    torch = [*cpu, mac_win]
    return [f"--extra-index-url {TORCH_CPU_INDEX}"], sorted([*(e for e in base if e.name in names), *torch],
                                                          key=lambda e: e.name)  # fmt: skip


def env_text(env: str, old: str) -> str:
    intro = []
    for line in old.splitlines():
        if not line.startswith("#") or line.startswith("# Generated by tools/lock.py"):
            break
        intro.append(line)
    options, entries = env_entries(env)
    lines = [
        *intro,
        "# Generated by tools/lock.py from requirements/ (do not edit the pip: list): python tools/lock.py envs",
        f"# roots: {' '.join(ENV_ROOTS[env])}; below, their exact closure with every wheel's sha256",
        "channels:",
        "  - conda-forge",
        "  - nodefaults",
        "dependencies:",
        f"  - python ={PYTHON_VERSION}",
        "  - pip",
        "  - pip:",
        *(f"      - {o}" for o in options),
        *(f"      - {e.line()}" for e in entries),
    ]
    return "\n".join(lines) + "\n"


def write_envs() -> None:
    for env in ENV_ROOTS:
        path = ROOT / "envs" / f"{env}.yaml"
        path.write_text(env_text(env, path.read_text() if path.exists() else ""))  # a new env: no intro yet


# ---- check: the two ends of pyproject's ranges -------------------------------------------------------
RESOLUTIONS = {"lowest": "lowest-direct", "highest": "highest"}  # uv's --resolution for each end
CHECK_DIR = ROOT / ".venvs-check"
RECORD = ROOT / "docs" / "cluster.md"
RECORD_BEGIN = "<!-- tools/lock.py check --record writes this table: do not edit -->"
RECORD_END = "<!-- end of the table tools/lock.py check --record writes -->"
# what each end runs: the adapter contract first (it fails fastest where a transformers release breaks an
# adapter), then every other unit test
# (the test of the record that `check --record` writes is left out: it holds once this run has recorded)
CHECK_RUNS = {
    "adapter contract": ["tests/test_adapters.py"],
    "unit tests": ["-m", "not dag", "-n", "2", "--ignore", "tests/test_adapters.py",
                   "--deselect", "tests/test_lock.py::test_the_tested_ends_are_pyprojects_ranges_as_they_are_now"],
}  # fmt: skip
META_ROWS = ("passed", "resolution", "python", "tests", "ranges-sha256")


def direct_requirements() -> list:
    """pyproject's dependencies and its extras workflow and test: what `pip install -e ".[workflow,test]"` asks."""
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [*project["dependencies"], *(r for k in ("workflow", "test") for r in project["optional-dependencies"][k])]
    return [Requirement(r) for r in reqs]


def ranges_digest() -> str:
    """sha256 of the ranges the ends test: the direct requirements and requires-python."""
    import tomllib

    python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    reqs = sorted(f"{canon(r.name)}{r.specifier}" for r in direct_requirements())
    return hashlib.sha256(json.dumps([python, reqs]).encode()).hexdigest()


def lower_bound(req) -> str | None:
    """The version of a requirement's `>=` (or `==`) clause."""
    bounds = [sp.version for sp in req.specifier if sp.operator in (">=", "==")]
    return bounds[0] if len(bounds) == 1 else None


def public(version: str) -> str:
    """A version without its local label (torch's `+cpu`)."""
    return version.split("+")[0]


def range_problems(end: str, versions: dict[str, str]) -> list[str]:
    """What is wrong with pyproject's ranges at one end, given the versions that end resolved (name -> version).

    Every direct dependency is resolved and inside its range; at the lowest end each one is exactly its lower
    bound, so that the bound is a version that was tested and not one that merely parses."""
    from packaging.version import Version

    problems = []
    for req in direct_requirements():
        name, got = canon(req.name), versions.get(canon(req.name))
        if got is None:
            problems.append(f"{name} was not resolved")
            continue
        if not req.specifier.contains(public(got), prereleases=True):
            problems.append(f"{name}=={got} is outside pyproject's {req}")
        if end != "lowest":
            continue
        low = lower_bound(req)
        if low is None:
            problems.append(f"{req} has no single lower bound (>=): the lowest end would test whatever is oldest")
        elif Version(public(got)) != Version(low):
            problems.append(
                f"pyproject says {req}, but the lowest resolution takes {name} {got} ({low} does not resolve with "
                f"the other lower bounds, so it was never tested): raise the bound to >={public(got)}"
            )
    return problems


def check_venv(uv: str, end: str, python: str, torch_wheel: Path | None, venv: Path) -> dict[str, str]:
    """Resolve one end of pyproject's ranges for `python` and install it, with layergeom, into a fresh `venv`.
    Returns the resolved versions (name -> version; torch's local label where --torch-wheel gave the build)."""
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([uv, "venv", "--quiet", "--no-config", "--python", python, str(venv)], check=True)
    vpy = str(venv / "bin" / "python")
    resolved = venv / "resolved.txt"
    compile_cmd = [uv, "pip", "compile", "pyproject.toml", "--extra", "workflow", "--extra", "test",
                   "--resolution", RESOLUTIONS[end], "--python", vpy, "--index-url", PYPI, "--no-config",
                   "--no-header", "--annotation-style", "split", "--quiet", "-o", str(resolved)]  # fmt: skip
    subprocess.run(compile_cmd, cwd=ROOT, check=True)
    entries = parse_lock(resolved.read_text())
    for e in entries:
        e.via = [v.replace(str(ROOT) + "/", "") for v in e.via]
    lines = [e.requirement for e in entries]
    if torch_wheel is not None:
        (torch,) = [e for e in entries if e.name == "torch"]
        version = wheel_info(torch_wheel)[0]
        if public(version) != torch.version:
            raise SystemExit(f"{torch_wheel.name} is torch {version}; the {end} end resolves torch {torch.version}")
        drop = split_closure(entries) | {"torch"}  # PyPI's CUDA build and what only it needs
        lines = [e.requirement for e in entries if e.name not in drop] + [f"torch @ {torch_wheel.resolve().as_uri()}"]
        entries = [e for e in entries if e.name not in drop] + [Entry("torch", version)]
    installing = venv / "install.txt"
    installing.write_text("\n".join(lines) + "\n")
    subprocess.run([uv, "pip", "sync", "--quiet", "--no-config", "--python", vpy, "--index-url", PYPI, str(installing)],
                   cwd=ROOT, check=True)  # fmt: skip
    subprocess.run([uv, "pip", "install", "--quiet", "--no-config", "--python", vpy, "--index-url", PYPI, "--no-deps",
                    "-e", "."], cwd=ROOT, check=True)  # fmt: skip
    return {e.name: e.version for e in entries}


def run_tests(venv: Path, args: list[str], junit: Path) -> dict[str, int]:
    """pytest in `venv` from the repository root; the counts of its junit report."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}", *args]
    rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    if not junit.exists():
        return {"passed": 0, "failed": 1, "rc": rc}
    suites = ET.parse(junit).getroot()
    suites = [suites] if suites.tag == "testsuite" else list(suites)
    n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    return {"passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"], "failed": n["failures"] + n["errors"],
            "skipped": n["skipped"], "rc": rc}  # fmt: skip


def check(
    uv: str, end: str, python: str, torch_wheel: Path | None, record: bool, venv_dir: Path, extra: list[str]
) -> int:
    venv = venv_dir / end
    versions = check_venv(uv, end, python, torch_wheel, venv)
    problems = range_problems(end, versions)
    results = {}
    for label, args in CHECK_RUNS.items():
        results[label] = run_tests(venv, [*args, *extra], venv / f"junit-{len(results)}.xml")
        print(f"tools/lock.py check: {end} end, {label}: {results[label]['passed']} passed, "
              f"{results[label]['failed']} failed, {results[label].get('skipped', 0)} skipped", flush=True)  # fmt: skip
    failed = [k for k, r in results.items() if r["failed"] or r["rc"] not in (0, 5)]
    direct = {canon(r.name): versions[canon(r.name)] for r in direct_requirements() if canon(r.name) in versions}
    print(f"tools/lock.py check: the {end} end resolved " + ", ".join(f"{k} {v}" for k, v in direct.items()))
    for p in problems:
        print(f"tools/lock.py check: {p}", file=sys.stderr)
    if failed or problems:
        print(f"tools/lock.py check: the {end} end FAILED ({', '.join(failed) or 'ranges'}); the venv is {venv}",
              file=sys.stderr)  # fmt: skip
        return 1
    if record:
        py = subprocess.run([str(venv / "bin" / "python"), "-c", "import platform; print(platform.python_version())"],
                            capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        meta = {
            "passed": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "resolution": f"`{RESOLUTIONS[end]}`",
            "python": py,
            "tests": "; ".join(f"{k}: {r['passed']} passed, {r['skipped']} skipped" for k, r in results.items())
            + (f"; pytest {' '.join(extra)}" if extra else ""),
            "ranges-sha256": f"`{ranges_digest()}`",
        }
        write_record(end, meta, direct)
        print(f"tools/lock.py check: recorded the {end} end in {RECORD.relative_to(ROOT)}")
    print(f"tools/lock.py check: the {end} end passed")
    return 0


def read_record(text: str | None = None) -> dict[str, dict[str, str]]:
    """The table `check --record` writes: {"lowest"|"highest": {row: value}}, rows = META_ROWS and package names;
    also {"range": {package: range}}."""
    text = RECORD.read_text() if text is None else text
    if RECORD_BEGIN not in text:
        return {"lowest": {}, "highest": {}, "range": {}}
    block = text.split(RECORD_BEGIN, 1)[1].split(RECORD_END, 1)[0]
    out: dict[str, dict[str, str]] = {"lowest": {}, "highest": {}, "range": {}}
    for line in block.strip().splitlines()[2:]:  # past the header and its rule
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4:
            continue
        key = cells[0].strip("`*")
        if cells[1]:
            out["range"][key] = cells[1].strip("`")
        for end, cell in zip(("lowest", "highest"), cells[2:]):
            if cell and cell != "–":
                out[end][key] = cell
    return out


def write_record(end: str, meta: dict[str, str], versions: dict[str, str]) -> None:
    """Put one end's result into the table (the other end's column kept as it was)."""
    old = read_record()
    ends = {"lowest": old["lowest"], "highest": old["highest"]}
    ends[end] = {**meta, **versions}
    ranges = {canon(r.name): str(r.specifier) for r in direct_requirements()}
    rows = ["| | pyproject.toml | lowest end | highest end |", "|---|---|---|---|"]
    rows += [f"| *{k}* | | {ends['lowest'].get(k, '–')} | {ends['highest'].get(k, '–')} |" for k in META_ROWS]
    rows += [
        f"| `{n}` | `{r}` | {ends['lowest'].get(n, '–')} | {ends['highest'].get(n, '–')} |" for n, r in ranges.items()
    ]
    table = "\n".join([RECORD_BEGIN, *rows, RECORD_END])
    text = RECORD.read_text()
    if RECORD_BEGIN not in text:
        raise SystemExit(f"{RECORD.relative_to(ROOT)} has no line {RECORD_BEGIN!r} to put the table after")
    head, rest = text.split(RECORD_BEGIN, 1)
    tail = rest.split(RECORD_END, 1)[1] if RECORD_END in rest else rest
    RECORD.write_text(head + table + tail)


# ---- install.sh ------------------------------------------------------------------------------------
def selected(flavour: str) -> list[Entry]:
    """The lock entries this interpreter installs with LAYERGEOM_TORCH=flavour (lock.txt + one torch file)."""
    from packaging.markers import Marker

    if flavour not in ("cpu", "cuda"):
        raise SystemExit(f"LAYERGEOM_TORCH must be cpu or cuda, not {flavour!r} (README, Quick start)")
    picked = [e for e in read(LOCK) + read(torch_file(flavour)) if not e.marker or Marker(e.marker).evaluate()]
    if not any(e.name == "torch" for e in picked):
        raise SystemExit(
            f"no hash-locked CPU build of torch for Python {sys.version_info.major}.{sys.version_info.minor} on "
            f"{sys.platform} {__import__('platform').machine()}: requirements/torch-cpu.txt has "
            f"{header(TORCH_CPU)['wheels']}. Use that Python, or LAYERGEOM_TORCH=cuda for PyPI's torch "
            "(a CUDA build on Linux, which runs on the CPU too), or add the wheel (docs/cluster.md)"
        )
    return picked


def torch_file(flavour: str) -> Path:
    """cpu: the CPU wheel on Linux x86-64, else PyPI's torch (the CPU build on macOS and Windows); cuda: PyPI's."""
    import platform

    linux_x86 = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")
    return TORCH_CPU if flavour == "cpu" and linux_x86 else TORCH_PYPI


def torch_args(flavour: str) -> list[str]:
    selected(flavour)  # fails with a message where there is no locked torch
    path = torch_file(flavour)
    extra = ["--extra-index-url", TORCH_CPU_INDEX] if path == TORCH_CPU else []
    return ["-r", str(path.relative_to(ROOT)), *extra]


def installed() -> dict[str, str]:
    import importlib.metadata as md

    return {canon(d.metadata["Name"]): d.version for d in md.distributions() if d.metadata["Name"]}


def check_installed(flavour: str) -> list[str]:
    """Differences between this interpreter's distributions and the lock (layergeom itself aside)."""
    want = {e.name: e.version for e in selected(flavour)}
    have = installed()
    have.pop("layergeom", None)
    problems = [f"{n}: locked {v}, installed {have.get(n, 'nothing')}" for n, v in want.items() if have.get(n) != v]
    problems += [f"{n} {v} is installed but not locked" for n, v in have.items() if n not in want]
    return sorted(problems)


def extras(flavour: str) -> list[str]:
    want = {e.name for e in selected(flavour)}
    return sorted(n for n in installed() if n not in want and n != "layergeom" and n not in VENV_SEED)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="resolve against PyPI with uv; rewrite requirements/ and envs/")
    c.add_argument("--uv", default="uv")
    c.add_argument("--upgrade", action="store_true", help="resolve afresh (default: keep the locked versions)")
    c.add_argument("--upgrade-package", action="append", default=[], metavar="NAME", help="resolve NAME afresh")
    c.add_argument("--torch-cpu-wheel", type=Path, nargs="*", default=[])
    sub.add_parser("envs", help="rewrite envs/*.yaml from requirements/ (offline)")
    sub.add_parser("pins", help="lock.txt's lines of these packages (install.sh: the installer first)").add_argument(
        "names", nargs="+"
    )
    for name in ("torch-args", "check-installed", "extras"):
        sub.add_parser(name).add_argument("flavour")
    k = sub.add_parser("check", help="a venv of one end of pyproject's ranges; the adapter contract and unit tests")
    k.add_argument("--resolution", choices=sorted(RESOLUTIONS), required=True)
    k.add_argument("--uv", default="uv")
    k.add_argument("--python", default=sys.executable, help="the interpreter of the venv (default: this one)")
    k.add_argument("--torch-wheel", type=Path, help="a local torch wheel of the resolved version (e.g. its CPU build)")
    k.add_argument("--record", action="store_true", help="on success, write the end into docs/cluster.md")
    k.add_argument("--venv-dir", type=Path, default=CHECK_DIR)
    k.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (recorded with the result)")
    a = ap.parse_args()
    if a.cmd == "check":
        if shutil.which(a.uv) is None:
            sys.exit(f"tools/lock.py check needs uv ({a.uv!r} is not on PATH): pip install uv, or pass --uv PATH")
        sys.exit(check(a.uv, a.resolution, a.python, a.torch_wheel, a.record, a.venv_dir, a.pytest_args))
    if a.cmd == "compile":
        compile_lock(a.uv, a.torch_cpu_wheel, a.upgrade, a.upgrade_package)
    elif a.cmd == "envs":
        write_envs()
    elif a.cmd == "torch-args":
        print(" ".join(torch_args(a.flavour)))
    elif a.cmd == "pins":
        entries = [e for e in read(LOCK) if e.name in {canon(n) for n in a.names}]
        assert {e.name for e in entries} == {canon(n) for n in a.names}, "not all of them are in lock.txt"
        print("".join(e.line() + "\n" for e in entries), end="")
    elif a.cmd == "extras":
        for name in extras(a.flavour):
            print(name)
    else:
        problems = check_installed(a.flavour)
        if problems:
            sys.exit("installed packages differ from the lock:\n  " + "\n  ".join(problems))
        print(f"tools/lock.py: the {len(installed()) - 1} installed distributions are the lock's ({a.flavour} torch)")


if __name__ == "__main__":
    main()
