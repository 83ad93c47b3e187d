"""The hash-locked environments, from PyPI alone (docs/cluster.md, "Locked environments").

    python tools/lock.py compile [--upgrade] [--torch-cpu-wheel WHEEL ...]   # needs uv and PyPI: rewrites requirements/, envs/
    python tools/lock.py envs                                    # offline: rewrites envs/*.yaml from requirements/
    python tools/lock.py pins NAME...                            # install.sh: lock.txt's lines of these packages
    python tools/lock.py torch-args cpu|cuda                     # install.sh: pip arguments of the torch step
    python tools/lock.py check-installed cpu|cuda [--extras]     # install.sh: this interpreter's packages = the lock

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

Each envs/*.yaml gets the exact closure of its roots (ENV_ROOTS) inline in `pip:`, lines copied from the lock
files with their hashes: Snakemake hashes the yaml's text, not a file it references.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
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


def compile_lock(uv: str, cpu_wheels: list[Path], upgrade: bool = False) -> None:
    cmd = [uv, *UV_COMMAND[1:], *(["--upgrade"] if upgrade else [])]
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
    c.add_argument("--torch-cpu-wheel", type=Path, nargs="*", default=[])
    sub.add_parser("envs", help="rewrite envs/*.yaml from requirements/ (offline)")
    sub.add_parser("pins", help="lock.txt's lines of these packages (install.sh: the installer first)").add_argument(
        "names", nargs="+"
    )
    for name in ("torch-args", "check-installed", "extras"):
        sub.add_parser(name).add_argument("flavour")
    a = ap.parse_args()
    if a.cmd == "compile":
        compile_lock(a.uv, a.torch_cpu_wheel, a.upgrade)
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
