"""Resumable long jobs (layergeom.resume): a job killed in the middle continues from its last snapshot (or its
finished boundaries) and writes, byte for byte, what an uninterrupted run writes; work of other inputs or
settings is not reused. The Jacobian job's own kill-and-resume tests are in test_spectral_jacobians.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from layergeom import resume

# ---- state trees ----------------------------------------------------------------------------------------


def test_pack_round_trips_every_kind_of_state_exactly():
    g = np.random.default_rng(0)
    frame = pd.DataFrame({"boundary": ["L0.attn", "L0.mlp"], "real": [0.1, np.nan], "nonzero": [True, False],
                          "index": np.arange(2)})  # fmt: skip
    tree = {
        "rows": [
            {
                "erank": np.float64(1 / 3),
                "depth": np.int64(4),
                "lo": float("nan"),
                "hi": float("inf"),
                "b": "L1.mlp",
                "flag": np.bool_(True),
                "z": 1 + 2j,
            }
        ],  # fmt: skip
        "chains": {
            ("update", 0.5, "none"): {
                "C": g.standard_normal((3, 3)) + 1j * g.standard_normal((3, 3)),
                "T": g.standard_normal((2, 3, 3)).astype(np.complex64),
                "log_norm": -np.inf,
                "floor": 1e-7,
            },  # fmt: skip
            ("full", 1.0, "none"): None,
        },
        "out": {3: g.standard_normal((2, 5)), 0: np.full((2, 5), np.nan)},
        "eig": [frame],
        "last": {"update": (1.5, 2.0, np.arange(3.0))},
    }
    back = resume.unpack(*resume.pack(tree))
    assert back["rows"][0] == {"erank": 1 / 3, "depth": 4, "lo": pytest.approx(float("nan"), nan_ok=True),
                               "hi": float("inf"), "b": "L1.mlp", "flag": True, "z": 1 + 2j}  # fmt: skip
    assert set(back["chains"]) == set(tree["chains"]) and back["chains"][("full", 1.0, "none")] is None
    for k in ("C", "T"):
        a, b = tree["chains"][("update", 0.5, "none")][k], back["chains"][("update", 0.5, "none")][k]
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert list(back["out"]) == [3, 0] and np.array_equal(back["out"][3], tree["out"][3])
    pd.testing.assert_frame_equal(back["eig"][0], frame)
    assert back["last"]["update"][:2] == (1.5, 2.0) and np.array_equal(back["last"]["update"][2], np.arange(3.0))
    with pytest.raises(TypeError, match="cannot snapshot"):
        resume.pack({"x": object()})
    scalars = resume.unpack(*resume.pack([np.float32(0.1), np.int32(-3), np.float16(2.5)]))
    assert [type(v) for v in scalars] == [np.float32, np.int32, np.float16] and scalars[0] == np.float32(0.1)
    with pytest.raises(TypeError, match="strings"):  # None would come back as the text "None"
        resume.pack({"f": pd.DataFrame({"b": ["L0.attn", None]})})


def test_snapshots_are_keyed_and_timed(tmp_path, monkeypatch):
    snap = resume.Snapshots(tmp_path / ".partial", "job", "k1", every_s=3600)
    assert snap.done == 0 and snap.load() is None
    assert not snap.save(1, lambda: pytest.fail("state asked for although no snapshot was due"))
    assert snap.save(1, lambda: {"x": np.arange(3)}, force=True)
    again = resume.Snapshots(tmp_path / ".partial", "job", "k1")
    assert again.done == 1 and np.array_equal(again.load()["state"]["x"], np.arange(3))
    assert again.load() is None  # handed over once
    other = resume.Snapshots(tmp_path / ".partial", "job", "k2")  # other inputs or settings
    assert other.done == 0 and not snap.path.exists()
    for torn in (b"not a zip", b"", None):  # snapshots torn by something outside our control
        snap.save(2, lambda: {"x": np.arange(1000)}, force=True)
        data = snap.path.read_bytes()
        snap.path.write_bytes(data[: len(data) // 2] if torn is None else torn)
        assert resume.Snapshots(tmp_path / ".partial", "job", "k1").done == 0 and not snap.path.exists()
    snap.save(2, lambda: {"x": 1}, force=True)

    def full_disk(*a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    assert not snap.save(3, lambda: {"x": 2}, force=True)  # logged, skipped: the job goes on
    monkeypatch.undo()
    assert resume.Snapshots(tmp_path / ".partial", "job", "k1").done == 2  # the previous one stays
    snap.save(3, lambda: {}, force=True)
    (tmp_path / ".partial" / ".job.snapshot.npz.k1ll3d_x").mkdir()  # a save killed half-way, in an earlier try
    snap.clear()
    assert not (tmp_path / ".partial").exists()


def test_job_key_follows_inputs_settings_and_code(tmp_path, monkeypatch):
    f = tmp_path / "a.npy"
    np.save(f, np.zeros(3))
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "x.npy", np.zeros(2))
    (tmp_path / "d" / resume.PARTIAL).mkdir()
    key = resume.job_key("j", [f, tmp_path / "d"], {"alphas": [0, 0.5], "n": np.int64(3)})
    assert key == resume.job_key("j", [f, tmp_path / "d"], {"alphas": [0, 0.5], "n": 3})
    (tmp_path / "d" / resume.PARTIAL / "work.npz").write_bytes(b"x")  # a job's own work does not change it
    assert key == resume.job_key("j", [f, tmp_path / "d"], {"alphas": [0, 0.5], "n": 3})
    assert key != resume.job_key("j", [f, tmp_path / "d"], {"alphas": [0, 1], "n": 3})
    assert key != resume.job_key("k", [f, tmp_path / "d"], {"alphas": [0, 0.5], "n": 3})
    np.save(f, np.ones(3))  # rewritten input
    assert key != resume.job_key("j", [f, tmp_path / "d"], {"alphas": [0, 0.5], "n": 3})
    other = resume.job_key("j", [f], {})
    monkeypatch.setattr(resume, "code_id", lambda: "0" * 64)  # other code: other keys
    assert resume.job_key("j", [f], {}) != other


# ---- kill in the middle, resume, compare ---------------------------------------------------------------
# Each job runs once uninterrupted, once in a child process that SIGKILLs itself in the middle (no cleanup of
# any kind runs), and once more here, resuming. Every snapshot is taken (snapshot_s=0); the kill comes
# before the K-th snapshot is written, i.e. after step K was computed but not saved.

SETUP = """
import os, signal, sys
sys.path[:0] = [{src!r}, {tests!r}]
import numpy as np
from test_resume import JOBS
from layergeom import resume
real, calls = resume.Snapshots.save, []
def save(self, done, state, force=False):
    calls.append(done)
    if len(calls) == {k}:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, done, state, force)
resume.Snapshots.save = save
from pathlib import Path
JOBS[{job!r}](Path({folder!r}), Path({out!r}), snapshot_s=0)
"""


def _boundary_files(folder):
    from test_spectral import nonnormal, write_boundary_files

    folder.mkdir(exist_ok=True)
    mats = {f"L{i}.{k}": nonnormal(6, seed=10 * i + j) / 3 for i in range(3) for j, k in enumerate(("attn", "mlp"))}
    return write_boundary_files(folder, mats)


def _files_of(folder):
    from layergeom.spectral.pipeline import BoundaryFiles

    names = json.loads((folder / "names.json").read_text())
    return BoundaryFiles(names, *([folder / f"{n}.{e}" for n in names] for e in ("npy", "groups.npy", "json")))


def _spectra(folder, out, **kw):
    from layergeom.spectral import pipeline

    pipeline.write_spectra(_files_of(folder), out, out.with_suffix(".eig.tsv"), sr_k=2, **kw)


def _cumulative(folder, out, **kw):
    from layergeom.spectral import pipeline

    pipeline.write_cumulative(_files_of(folder), out, **kw)


def _schur(folder, out, alphas=(0, 0.5, 1), **kw):
    from layergeom.spectral import pipeline

    pipeline.write_schur(_files_of(folder), out, alphas=list(alphas), sr_k=2, ci_controls=["none", "random"], **kw)


def _convergence(folder, out, **kw):
    from layergeom.spectral import pipeline

    pipeline.write_convergence(_files_of(folder), out, n_edge=2, sr_k=2, **kw)


def _kl_inputs():
    from conftest import tiny_model

    from layergeom.adapters import get_adapter

    adapter = get_adapter(tiny_model("llama"))
    g = np.random.default_rng(3)
    ids = g.integers(0, 512, (6, 12))
    windows, positions = np.repeat(np.arange(6), 2), g.integers(1, 12, 12)
    patches = {l: g.standard_normal((2, 12, adapter.d_model)).astype(np.float32) for l in range(adapter.n_layers)}
    return adapter, ids, windows, positions, patches


def _kl(folder, out, snapshot_s=None):
    """The batched KL over 6 windows of 2 anchors, 2 windows per call (3 steps), its table like the job's."""
    from layergeom.io import write_tsv
    from layergeom.tokenwise.kl import patched_kl

    adapter, ids, windows, positions, patches = _kl_inputs()
    snap = None if snapshot_s is None else resume.Snapshots(resume.work_dir(out), "tokenwise_kl", "k", snapshot_s)
    kl = patched_kl(adapter, ids, windows, positions, patches, max_rows=8, snapshots=snap)
    write_tsv(pd.DataFrame({f"L{l}v{v}": kl[l][v] for l in kl for v in range(2)}), out)
    if snap is not None:
        snap.clear()


JOBS = {"spectra": _spectra, "cumulative": _cumulative, "schur": _schur, "convergence": _convergence, "kl": _kl}
STEPS = {"spectra": 6, "cumulative": 6, "schur": 6, "convergence": 6 * 4, "kl": 3}  # steps of each job here


def _outputs(out) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.parent.glob(out.stem + "*.tsv"))}


@pytest.mark.parametrize("job", list(JOBS))
def test_a_killed_job_resumes_from_its_last_snapshot(tmp_path, monkeypatch, job):
    folder = tmp_path / "jac"
    files = _boundary_files(folder)
    (folder / "names.json").write_text(json.dumps(files.names))
    whole = tmp_path / "whole" / f"{job}.tsv"
    JOBS[job](folder, whole)  # uninterrupted, no snapshots
    k = 10 if job == "convergence" else STEPS[job] // 2 + 1  # convergence: resumed inside a subset size (9 = 6 + 3)
    out = tmp_path / "run" / f"{job}.tsv"
    script = SETUP.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=k, job=job, folder=str(folder),
                           out=str(out))  # fmt: skip
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    assert not out.exists() and len(list((out.parent / resume.PARTIAL).glob("*.snapshot.npz"))) == 1
    calls, real = [], resume.Snapshots.save

    def save(self, done, state, force=False):
        calls.append(done)
        return real(self, done, state, force)

    monkeypatch.setattr(resume.Snapshots, "save", save)
    JOBS[job](folder, out, snapshot_s=0)
    assert calls == list(range(k, STEPS[job] + 1))  # the K-1 saved steps were not computed again
    assert _outputs(out) == _outputs(whole) and len(_outputs(out)) >= 1  # byte for byte
    assert not (out.parent / resume.PARTIAL).exists()  # the work folder is gone


def test_a_snapshot_of_other_settings_is_not_reused(tmp_path, monkeypatch):
    folder = tmp_path / "jac"
    files = _boundary_files(folder)
    (folder / "names.json").write_text(json.dumps(files.names))
    out = tmp_path / "run" / "schur.tsv"
    real, calls = resume.Snapshots.save, []

    def crash(self, done, state, force=False):
        calls.append(done)
        if done == 3 and len(calls) == 3:  # the first run only
            raise RuntimeError("injected crash")
        return real(self, done, state, force)

    monkeypatch.setattr(resume.Snapshots, "save", crash)
    with pytest.raises(RuntimeError, match="injected"):
        _schur(folder, out, snapshot_s=0)
    assert calls == [1, 2, 3]
    _schur(folder, out, alphas=(0, 1), snapshot_s=0)  # other alphas: from the start
    assert calls == [1, 2, 3, 1, 2, 3, 4, 5, 6]
    whole = tmp_path / "whole" / "schur.tsv"
    _schur(folder, whole, alphas=(0, 1))
    assert out.read_bytes() == whole.read_bytes()


def test_killed_graph_job_reuses_its_finished_boundaries(tmp_path, monkeypatch):
    import torch
    from conftest import tiny_model
    from test_topology import _defaults

    from layergeom.adapters import get_adapter
    from layergeom.store import dump_activations
    from layergeom.topology import pipeline

    ad = get_adapter(tiny_model("llama"))
    windows = torch.randint(0, 512, (8, 16), generator=torch.Generator().manual_seed(2)).numpy()
    dump_activations(ad, windows, tmp_path / "acts", batch_size=4)
    names = [b.name for b in ad.boundaries]
    cfg = _defaults(top_k=4, resolution_sweep=[0.1])

    def outs(folder):
        return {k: [folder / f"{n}{s}" for n in names] for k, s in
                (("nodes", ".tsv"), ("edges", ".edges.tsv"), ("sweeps", ".sweep.tsv"))}  # fmt: skip

    whole = outs(tmp_path / "whole")
    pipeline.run_topologies(tmp_path / "acts", names, cfg, 0, **whole)
    run = outs(tmp_path / "graphs")
    k = len(names) // 2
    script = f"""
import os, signal, sys
sys.path[:0] = [{str(ROOT / "src")!r}, {str(ROOT / "tests")!r}]
from pathlib import Path
from layergeom.topology import pipeline
real, done = pipeline.mark_done, []
def mark(*a, **kw):
    if len(done) == {k}:
        os.kill(os.getpid(), signal.SIGKILL)
    done.append(1)
    return real(*a, **kw)
pipeline.mark_done = mark
pipeline.run_topologies({str(tmp_path / "acts")!r}, {names!r}, {cfg!r}, 0,
                        **{{k: [Path(p) for p in v] for k, v in { ({k: list(map(str, v)) for k, v in run.items()})!r}.items()}})
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    work = tmp_path / "graphs" / resume.PARTIAL
    assert len(list(work.glob("*.done.json"))) == k and not any(p.exists() for v in run.values() for p in v)
    computed, real = [], pipeline.store_topology
    monkeypatch.setattr(pipeline, "store_topology", lambda store, b, *a: computed.append(b) or real(store, b, *a))
    pipeline.run_topologies(tmp_path / "acts", names, cfg, 0, **run)
    assert computed == names[k:]
    for key in run:
        for a, b in zip(run[key], whole[key]):
            assert a.read_bytes() == b.read_bytes(), a.name
    assert not work.exists()


ACTIVATIONS_JOB = """
import os, signal, sys
sys.path[:0] = [{src!r}, {tests!r}]
import numpy as np
from conftest import tiny_model
from layergeom import resume
from layergeom.adapters import get_adapter
from layergeom.store import dump_activations
real, done = resume.mark_done, []
def mark(*a, **kw):
    if len(done) == {k}:
        os.kill(os.getpid(), signal.SIGKILL)
    done.append(1)
    return real(*a, **kw)
resume.mark_done = mark
windows = np.load({windows!r})
dump_activations(get_adapter(tiny_model("llama")), windows, {out!r}, batch_size=2, snapshot_s=0,
                 resume_inputs=[{windows!r}])
"""


def _store_bytes(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_killed_activation_dump_resumes(tmp_path):
    from conftest import tiny_model

    from layergeom.adapters import get_adapter
    from layergeom.store import dump_activations

    windows = np.random.default_rng(4).integers(0, 512, (9, 8))
    np.save(tmp_path / "windows.npy", windows)
    adapter = get_adapter(tiny_model("llama"))
    dump_activations(adapter, windows, tmp_path / "whole" / "activations", batch_size=2)
    out = tmp_path / "run" / "activations"
    k = 2  # killed after 2 snapshots (4 windows), while the third batch is being recorded
    script = ACTIVATIONS_JOB.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=k, out=str(out),
                                    windows=str(tmp_path / "windows.npy"))  # fmt: skip
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    work = out.parent / resume.PARTIAL
    assert not out.exists() and json.loads((work / "activations.progress.json").read_text())["windows_done"] == 4
    firsts, real = [], adapter.capture
    adapter.capture = lambda ids: firsts.append(ids.shape[0]) or real(ids)
    dump_activations(adapter, windows, out, batch_size=2, snapshot_s=0, resume_inputs=[tmp_path / "windows.npy"])
    assert firsts == [2, 2, 1]  # windows 4..8 only
    assert _store_bytes(out) == _store_bytes(tmp_path / "whole" / "activations")
    assert not work.exists()


def test_resumable_dump_needs_the_identity_of_its_inputs(tmp_path):
    from conftest import tiny_model

    from layergeom.adapters import get_adapter
    from layergeom.store import dump_activations

    with pytest.raises(ValueError, match="resume_inputs"):
        dump_activations(get_adapter(tiny_model("llama")), np.zeros((2, 4), int), tmp_path / "a", snapshot_s=0)


def test_resumable_dump_of_bad_activations_leaves_nothing(tmp_path):
    import torch
    from conftest import tiny_model

    from layergeom.adapters import get_adapter
    from layergeom.runtime import LayergeomError
    from layergeom.store import dump_activations

    adapter = get_adapter(tiny_model("llama"))
    real = adapter.capture

    def capture(ids):  # the third batch has a NaN
        cap = real(ids)
        if capture.calls == 2:
            cap = {k: torch.full_like(v, float("nan")) for k, v in cap.items()}
        capture.calls += 1
        return cap

    capture.calls = 0
    adapter.capture = capture
    windows = np.random.default_rng(4).integers(0, 512, (9, 8))
    np.save(tmp_path / "windows.npy", windows)
    (tmp_path / "run").mkdir()
    with pytest.raises(LayergeomError, match="non-finite activations at boundary .*, window 4"):
        dump_activations(adapter, windows, tmp_path / "run" / "activations", batch_size=2, snapshot_s=0,
                         resume_inputs=[tmp_path / "windows.npy"])  # fmt: skip
    assert not list((tmp_path / "run").iterdir())  # neither the store nor its work folder
