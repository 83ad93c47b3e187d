"""The hash-locked environments (tools/lock.py): requirements/*.txt against pyproject.toml, envs/*.yaml against
requirements/, and an installed venv against the lock.

Resolving the lock again needs PyPI, so these tests compare structurally: the lock's recorded input digest
against pyproject's dependencies now, every pin against pyproject's ranges, the closure through uv's `# via`
annotations; the envs are regenerated from requirements/ in memory (offline) and compared with the files.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, load_script
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11 (tomllib)")

lock = load_script(ROOT / "tools" / "lock.py")

FILES = (lock.LOCK, lock.TORCH_PYPI, lock.TORCH_CPU)


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for k in ("workflow", "test") for r in project["optional-dependencies"][k]]
    lock_in = [ln.split("#")[0].strip() for ln in lock.LOCK_IN.read_text().splitlines()]
    return [Requirement(r) for r in [*project["dependencies"], *extras, *filter(None, lock_in)]]


def test_every_locked_line_is_an_exact_pin_with_hashes():
    for path in FILES:
        entries = lock.read(path)
        assert entries, path
        for e in entries:
            assert e.hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in e.hashes), f"{path.name}: {e.name}"
        keys = [(e.name, e.marker) for e in entries]
        assert len(keys) == len(set(keys)), f"{path.name} lists a package twice under one marker"
    # every line pip reads is part of an entry (a line that parse_lock skipped would be installed unchecked)
    for path in FILES:
        body = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        assert sum(not ln.startswith(" ") for ln in body) == len(lock.read(path)), path.name


def test_the_lock_is_resolved_from_pyproject_as_it_is_now():
    """pyproject.toml's dependencies, its extras, requirements/lock.in or the uv command changed: run
    `python tools/lock.py compile` (docs/cluster.md)."""
    for path in (lock.LOCK, lock.TORCH_PYPI):
        assert lock.header(path)["input-sha256"] == lock.input_digest(), f"{path.name} is stale"
        assert lock.header(path)["command"] == " ".join(lock.UV_COMMAND)
    assert lock.header(lock.LOCK) == lock.header(lock.TORCH_PYPI)  # one resolution, split in two


def test_locked_versions_satisfy_pyproject():
    entries = lock.read(lock.LOCK) + lock.read(lock.TORCH_PYPI)
    versions: dict[str, list[str]] = {}
    for e in entries:
        versions.setdefault(e.name, []).append(e.version)
    problems = []
    for req in project_requirements():
        name = canonicalize_name(req.name)
        if name not in versions:
            problems.append(f"{req} is not locked")
        problems += [
            f"locked {name}=={v}, pyproject says {req}" for v in versions.get(name, []) if v not in req.specifier
        ]
    assert not problems, "\n".join(problems)


def test_the_lock_is_a_closed_graph():
    """Every package is needed by an input or by another locked package, and names no unlocked parent."""
    entries = lock.read(lock.LOCK) + lock.read(lock.TORCH_PYPI)
    names = {e.name for e in entries}
    kids = lock.children(entries)
    inputs = [e.name for e in entries if any(v.startswith(("-r ", "layergeom (")) for v in e.via)]
    assert lock.closure(inputs, kids) == names
    for e in entries:
        assert e.via, e.name
        for v in e.via:
            assert v.startswith(("-r ", "layergeom (")) or lock.canon(v) in names, f"{e.name} via {v}"
    # lock.txt alone is closed but for torch: only torch's CUDA build needs what torch-pypi.txt adds
    base = {e.name for e in lock.read(lock.LOCK)}
    for e in lock.read(lock.TORCH_PYPI):
        assert e.name == "torch" or lock.CUDA_ONLY.match(e.name) or set(map(lock.canon, e.via)) - base, e.name


def test_the_three_torch_files_are_one_version():
    (pinned,) = [r for r in project_requirements() if r.name == "torch" and "==" in str(r.specifier)]  # lock.in
    (pypi,) = [e for e in lock.read(lock.TORCH_PYPI) if e.name == "torch"]
    cpu = lock.read(lock.TORCH_CPU)
    assert str(pinned.specifier) == f"=={pypi.version}"
    assert not pypi.marker
    assert [e.version for e in cpu] == [f"{pypi.version}+cpu"]
    assert "sys_platform == 'linux'" in cpu[0].marker and "platform_machine == 'x86_64'" in cpu[0].marker
    assert len(cpu[0].hashes) == len(lock.header(lock.TORCH_CPU)["wheels"].split())
    # the CPU build's own dependencies are in lock.txt, so it installs with --no-deps beside it
    assert set(lock.torch_cpu_requires()) <= {e.name for e in lock.read(lock.LOCK)}
    assert "torch" not in {e.name for e in lock.read(lock.LOCK)}


@pytest.mark.parametrize("env", sorted(lock.ENV_ROOTS))
def test_env_is_generated_from_the_lock(env):
    """envs/<env>.yaml is what `python tools/lock.py envs` writes from requirements/ now."""
    path = ROOT / "envs" / f"{env}.yaml"
    assert path.read_text() == lock.env_text(env, path.read_text()), f"run: python tools/lock.py envs ({path.name})"


@pytest.mark.parametrize("env", sorted(lock.ENV_ROOTS))
def test_env_lists_its_locked_closure_with_hashes(env):
    """Independently of the generator: each pip line is a lock line (same pin, marker and hashes), every line
    has hashes (pip's hash mode is all or nothing), and a package's locked dependencies are in the env too."""
    spec = yaml.safe_load((ROOT / "envs" / f"{env}.yaml").read_text())
    (pip,) = [d["pip"] for d in spec["dependencies"] if isinstance(d, dict)]
    entries = [lock.parse_line(p) for p in pip if not p.startswith("--")]
    assert all(e.hashes for e in entries)
    locked = {(e.name, e.marker): e for path in FILES for e in lock.read(path)}
    (pypi_torch,) = [e for e in lock.read(lock.TORCH_PYPI) if e.name == "torch"]
    for e in entries:
        cpu_env = lock.torch_flavour(env) == "cpu"
        if cpu_env and e.name == "torch" and "+cpu" not in e.version:  # PyPI's CPU build, macOS and Windows
            assert (e.version, e.hashes) == (pypi_torch.version, pypi_torch.hashes)
            assert "linux" not in e.marker
            continue
        assert (e.name, e.marker) in locked, f"{env}: {e.requirement} is not a lock line"
        ref = locked[(e.name, e.marker)]
        assert (e.version, e.hashes) == (ref.version, ref.hashes), e.name
    names = {e.name for e in entries}
    assert {lock.canon(r) for r in lock.ENV_ROOTS[env]} <= names
    allof = lock.read(lock.LOCK) + lock.read(lock.TORCH_PYPI)
    for e in allof:
        for parent in map(lock.canon, e.via):
            cuda_of_cpu_torch = lock.torch_flavour(env) == "cpu" and parent == "torch" and lock.CUDA_ONLY.match(e.name)
            if parent in names and not cuda_of_cpu_torch:
                assert e.name in names, f"{env}: {parent} needs {e.name}, which the env lacks"
    assert ("--extra-index-url " + lock.TORCH_CPU_INDEX in pip) == (lock.torch_flavour(env) == "cpu")


def test_check_installed_sees_a_wrong_version_and_an_extra_package(monkeypatch):
    """tools/lock.py check-installed, which install.sh runs last, fails on a drifted venv."""
    want = {e.name: e.version for e in lock.selected("cuda")}
    exact = {**want, "layergeom": "0.1.0"}
    monkeypatch.setattr(lock, "installed", lambda: dict(exact))
    assert lock.check_installed("cuda") == []
    drifted = {**exact, "numpy": "1.0", "left-over": "1"}
    monkeypatch.setattr(lock, "installed", lambda: drifted)
    problems = lock.check_installed("cuda")
    assert any(p.startswith("numpy: locked") for p in problems) and any("left-over" in p for p in problems)
    assert lock.extras("cuda") == ["left-over"]


def test_an_unknown_torch_flavour_is_refused():
    res = subprocess.run(["bash", "tools/install.sh"], cwd=ROOT, env={"LAYERGEOM_TORCH": "torch==2.13.0", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 2 and "must be cpu or cuda" in res.stderr


def test_the_venv_install_sh_made_holds_exactly_the_lock():
    """In the venv tools/install.sh built (as tools/test.sh and CI run the tests), the installed distributions are
    the lock's for the torch build it installed: no other package, no other version."""
    stamp = ROOT / ".venv" / ".layergeom-installed"
    if not (stamp.is_file() and sys.prefix == str(ROOT / ".venv")):
        pytest.skip("not running in the .venv that tools/install.sh made")
    flavour = stamp.read_text().split()[-1]
    assert lock.check_installed(flavour) == []


# ---- the ends of pyproject's ranges (tools/lock.py check) ------------------------------------------------
def test_the_tested_ends_are_pyprojects_ranges_as_they_are_now():
    """docs/cluster.md's table of tested versions (`tools/lock.py check --resolution lowest|highest --record`) is
    of pyproject's ranges now: both ends passed on them, each version inside its range, and the lowest end at
    exactly every lower bound. A range changed since: run the check of both ends again (docs/cluster.md)."""
    record = lock.read_record()
    for end in ("lowest", "highest"):
        assert record[end].get("ranges-sha256", "").strip("`") == lock.ranges_digest(), (
            f"pyproject's ranges are not the ones the {end} end passed on: python tools/lock.py check "
            f"--resolution {end} --record"
        )
        assert not lock.range_problems(end, record[end]), end
    assert record["range"] == {lock.canon(r.name): str(r.specifier) for r in lock.direct_requirements()}


def test_range_problems_name_a_lower_bound_that_was_not_tested():
    reqs = lock.direct_requirements()
    at_bounds = {lock.canon(r.name): lock.lower_bound(r) for r in reqs}
    assert None not in at_bounds.values(), "a direct dependency without a single lower bound (>=)"
    assert lock.range_problems("lowest", at_bounds) == []
    assert lock.range_problems("lowest", {**at_bounds, "torch": at_bounds["torch"] + "+cpu"}) == []  # the CPU build
    above = {**at_bounds, "numpy": at_bounds["numpy"] + ".1"}
    (problem,) = lock.range_problems("lowest", above)
    assert "numpy" in problem and "raise the bound" in problem
    assert lock.range_problems("highest", above) == []  # the highest end checks the ranges only
    (missing,) = lock.range_problems("highest", {k: v for k, v in at_bounds.items() if k != "pyyaml"})
    assert "pyyaml was not resolved" in missing
    (outside,) = lock.range_problems("highest", {**at_bounds, "transformers": "4.0.0"})
    assert "outside" in outside


def test_the_record_keeps_the_other_end(tmp_path, monkeypatch):
    """`check --record` of one end rewrites its column only, inside the marked block of the page."""
    page = tmp_path / "cluster.md"
    page.write_text(f"# x\n\n{lock.RECORD_BEGIN}\n{lock.RECORD_END}\n\nafter\n")
    monkeypatch.setattr(lock, "RECORD", page)
    versions = {lock.canon(r.name): lock.lower_bound(r) for r in lock.direct_requirements()}
    lock.write_record("lowest", {"passed": "2026-01-01 00:00 UTC", "ranges-sha256": "`abc`"}, versions)
    lock.write_record("highest", {"passed": "2026-01-02 00:00 UTC"}, {**versions, "numpy": "9.9"})
    record = lock.read_record()
    assert record["lowest"]["passed"] == "2026-01-01 00:00 UTC" and record["lowest"]["ranges-sha256"] == "`abc`"
    assert record["lowest"]["numpy"] == versions["numpy"] and record["highest"]["numpy"] == "9.9"
    assert "ranges-sha256" not in record["highest"]
    assert page.read_text().startswith("# x\n\n") and page.read_text().endswith(f"{lock.RECORD_END}\n\nafter\n")


def test_check_without_uv_says_so():
    res = subprocess.run([sys.executable, "tools/lock.py", "check", "--resolution", "lowest", "--uv", "no-such-uv"],
                         cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert res.returncode != 0 and "needs uv" in res.stderr.strip().splitlines()[-1]
