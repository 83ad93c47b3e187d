"""Resumable long jobs (layergeom.resume): a job killed in the middle continues from its last snapshot (or its
finished boundaries) and writes, byte for byte, what an uninterrupted run writes; work of other inputs or
settings is not reused. The Jacobian job's own kill-and-resume tests are in test_spectral_jacobians.py."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import forked
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT
from test_spectral import CONVERGENCE_KW, CUMULATIVE_KW, SCHUR_KW, SPECTRA_KW

from layergeom.resume import items, keys, snapshots, trees, work_folder

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
    back = trees.unpack(*trees.pack(tree))
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
        trees.pack({"x": object()})
    scalars = trees.unpack(*trees.pack([np.float32(0.1), np.int32(-3), np.float16(2.5)]))
    assert [type(v) for v in scalars] == [np.float32, np.int32, np.float16] and scalars[0] == np.float32(0.1)
    with pytest.raises(TypeError, match="strings"):  # None would come back as the text "None"
        trees.pack({"f": pd.DataFrame({"b": ["L0.attn", None]})})


def test_snapshots_are_keyed_and_timed(tmp_path, monkeypatch):
    snap = snapshots.Snapshots(tmp_path / ".partial", "job", "k1", every_s=3600)
    assert snap.done == 0 and snap.load() is None
    assert not snap.save(1, lambda: pytest.fail("state asked for although no snapshot was due"))
    assert snap.save(1, lambda: {"x": np.arange(3)}, force=True)
    again = snapshots.Snapshots(tmp_path / ".partial", "job", "k1", every_s=3600)
    assert again.done == 1 and np.array_equal(again.load()["state"]["x"], np.arange(3))
    assert again.load() is None  # handed over once
    other = snapshots.Snapshots(tmp_path / ".partial", "job", "k2", every_s=3600)  # other inputs or settings
    assert other.done == 0 and not snap.path.exists()
    for torn in (b"not a zip", b"", None):  # snapshots torn by something outside our control
        snap.save(2, lambda: {"x": np.arange(1000)}, force=True)
        data = snap.path.read_bytes()
        snap.path.write_bytes(data[: len(data) // 2] if torn is None else torn)
        assert snapshots.Snapshots(tmp_path / ".partial", "job", "k1", every_s=3600).done == 0
        assert not snap.path.exists()
    snap.save(2, lambda: {"x": 1}, force=True)

    def full_disk(*a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    assert not snap.save(3, lambda: {"x": 2}, force=True)  # logged, skipped: the job goes on
    monkeypatch.undo()
    assert snapshots.Snapshots(tmp_path / ".partial", "job", "k1", every_s=3600).done == 2  # the previous one stays
    snap.save(3, lambda: {}, force=True)
    (tmp_path / ".partial" / ".job.snapshot.npz.k1ll3d_x").mkdir()  # a save killed half-way, in an earlier try
    snap.clear()
    assert not (tmp_path / ".partial").exists()


def test_no_snapshots_do_nothing(tmp_path):
    """A job that is not resumable (``every_s`` None) gets NO_SNAPSHOTS: the same calls, nothing read or written."""
    snap = snapshots.Snapshots.for_job(tmp_path / "out.tsv", "job", [], {}, None)
    assert snap is snapshots.NO_SNAPSHOTS and isinstance(snap, snapshots.Snapshots)
    assert snap.done == 0 and snap.load() is None and not snap.due()
    assert not snap.save(1, lambda: pytest.fail("state asked for without snapshots"), force=True)
    snap.clear()
    assert list(tmp_path.iterdir()) == []  # no work folder, no lock
    kept = snapshots.Snapshots.for_job(tmp_path / "out.tsv", "job", [], {}, 0)  # every_s 0: a snapshot each step
    assert kept is not snapshots.NO_SNAPSHOTS and kept.save(1, lambda: {"x": 1}) and kept.path.exists()
    kept.clear()


def test_job_key_follows_inputs_settings_and_code(tmp_path, monkeypatch):
    f = tmp_path / "a.npy"
    np.save(f, np.zeros(3))
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "x.npy", np.zeros(2))
    (tmp_path / "d" / work_folder.PARTIAL).mkdir()
    key = keys.job_key("j", [f, tmp_path / "d"], {"alphas": [0, 0.5], "n": np.int64(3)})
    assert key == keys.job_key("j", [f, tmp_path / "d"], {"alphas": [0, 0.5], "n": 3})
    (tmp_path / "d" / work_folder.PARTIAL / "work.npz").write_bytes(b"x")  # a job's own work does not change it
    assert key == keys.job_key("j", [f, tmp_path / "d"], {"alphas": [0, 0.5], "n": 3})
    assert key != keys.job_key("j", [f, tmp_path / "d"], {"alphas": [0, 1], "n": 3})
    assert key != keys.job_key("k", [f, tmp_path / "d"], {"alphas": [0, 0.5], "n": 3})
    np.save(f, np.ones(3))  # rewritten input
    assert key != keys.job_key("j", [f, tmp_path / "d"], {"alphas": [0, 0.5], "n": 3})
    other = keys.job_key("j", [f], {})
    monkeypatch.setattr(keys, "code_id", lambda: "0" * 64)  # other code: other keys
    assert keys.job_key("j", [f], {}) != other


# ---- kill in the middle, resume, compare ---------------------------------------------------------------
# Each job runs once uninterrupted, once in a child process that SIGKILLs itself in the middle (no cleanup of
# any kind runs), and once more here, resuming. Every snapshot is taken (snapshot_s=0); the kill comes
# before the K-th snapshot is written, i.e. after step K was computed but not saved.

# the start of a child's script: SIGKILL itself at its {k}-th snapshot (tests/test_fanout.py uses it too)
KILL_AT_SNAPSHOT = """
import os, signal, sys
sys.path[:0] = [{src!r}, {tests!r}]
from layergeom.resume import snapshots
real, calls = snapshots.Snapshots.save, []
def save(self, done, state, force=False):
    calls.append(done)
    if len(calls) == {k}:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, done, state, force)
snapshots.Snapshots.save = save
"""
SETUP = (
    KILL_AT_SNAPSHOT
    + """
import numpy as np
from test_resume import JOBS
from pathlib import Path
JOBS[{job!r}](Path({folder!r}), Path({out!r}), snapshot_s=0)
"""
)


def _boundary_files(folder):
    from test_spectral import nonnormal, write_boundary_files

    folder.mkdir(exist_ok=True)
    mats = {f"L{i}.{k}": nonnormal(6, seed=10 * i + j) / 3 for i in range(3) for j, k in enumerate(("attn", "mlp"))}
    return write_boundary_files(folder, mats)


def _files_of(folder):
    from layergeom.spectral.jobs.common import BoundaryFiles

    names = json.loads((folder / "names.json").read_text())
    return BoundaryFiles(names, *([folder / f"{n}.{e}" for n in names] for e in ("npy", "groups.npy", "json")))


def _spectra(folder, out, **kw):
    from layergeom.spectral.jobs.table import write_spectra

    write_spectra(_files_of(folder), out, out.with_suffix(".eig.tsv"), **SPECTRA_KW | {"sr_k": 2} | kw)


def _cumulative(folder, out, **kw):
    from layergeom.spectral.jobs.cumulative import write_cumulative

    write_cumulative(_files_of(folder), out, **CUMULATIVE_KW | kw)


def _schur(folder, out, alphas=(0, 0.5, 1), **kw):
    from layergeom.spectral.jobs.cumulative import write_cumulative
    from layergeom.spectral.jobs.schur import write_schur

    over = {"alphas": list(alphas), "sr_k": 2, "ci_controls": ["none", "random"]}
    cumulative = Path(folder).parent / f"{Path(folder).name}.cumulative.tsv"  # its α = 1 rows, beside the J̄
    if not cumulative.exists():
        write_cumulative(_files_of(folder), cumulative, **CUMULATIVE_KW)
    write_schur(_files_of(folder), out, cumulative, **SCHUR_KW | over | kw)


def _convergence(folder, out, **kw):
    from layergeom.spectral.jobs.convergence import write_convergence

    write_convergence(_files_of(folder), out, **CONVERGENCE_KW | {"n_edge": 2, "sr_k": 2} | kw)


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
    snap = snapshots.NO_SNAPSHOTS
    if snapshot_s is not None:
        snap = snapshots.Snapshots(work_folder.work_dir(out), "tokenwise_kl", "k", snapshot_s)
    kl = patched_kl(adapter, ids, windows, positions, patches, max_rows=8, snapshots=snap)
    write_tsv(pd.DataFrame({f"L{l}v{v}": kl[l][v] for l in kl for v in range(2)}), out)
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
    k = 10 if job == "convergence" else STEPS[job] // 2 + 1  # convergence: resumed inside a boundary (9 = 2·4 + 1)
    out = tmp_path / "run" / f"{job}.tsv"
    script = SETUP.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=k, job=job, folder=str(folder),
                           out=str(out))  # fmt: skip
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    assert not out.exists() and len(list((out.parent / work_folder.PARTIAL).glob("*.snapshot.npz"))) == 1
    calls, real = [], snapshots.Snapshots.save

    def save(self, done, state, force=False):
        calls.append(done)
        return real(self, done, state, force)

    monkeypatch.setattr(snapshots.Snapshots, "save", save)
    JOBS[job](folder, out, snapshot_s=0)
    assert calls == list(range(k, STEPS[job] + 1))  # the K-1 saved steps were not computed again
    assert _outputs(out) == _outputs(whole) and len(_outputs(out)) >= 1  # byte for byte
    assert not (out.parent / work_folder.PARTIAL).exists()  # the work folder is gone


def test_a_snapshot_of_other_settings_is_not_reused(tmp_path, monkeypatch):
    folder = tmp_path / "jac"
    files = _boundary_files(folder)
    (folder / "names.json").write_text(json.dumps(files.names))
    out = tmp_path / "run" / "schur.tsv"
    real, calls = snapshots.Snapshots.save, []

    def crash(self, done, state, force=False):
        calls.append(done)
        if done == 3 and len(calls) == 3:  # the first run only
            raise RuntimeError("injected crash")
        return real(self, done, state, force)

    monkeypatch.setattr(snapshots.Snapshots, "save", crash)
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
    pipeline.write_graphs(tmp_path / "acts", names, cfg, 0, **whole)
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
pipeline.write_graphs({str(tmp_path / "acts")!r}, {names!r}, {cfg!r}, 0,
                        **{{k: [Path(p) for p in v] for k, v in { ({k: list(map(str, v)) for k, v in run.items()})!r}.items()}})
"""
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    work = tmp_path / "graphs" / work_folder.PARTIAL
    assert len(list(work.glob("*.done.json"))) == k and not any(p.exists() for v in run.values() for p in v)
    computed, real = [], pipeline.store_topology
    monkeypatch.setattr(pipeline, "store_topology", lambda store, b, *a: computed.append(b) or real(store, b, *a))
    pipeline.write_graphs(tmp_path / "acts", names, cfg, 0, **run)
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
from layergeom.adapters import get_adapter
from layergeom.resume import items
from layergeom.store import dump_activations
real, done = items.mark_done, []
def mark(*a, **kw):
    if len(done) == {k}:
        os.kill(os.getpid(), signal.SIGKILL)
    done.append(1)
    return real(*a, **kw)
items.mark_done = mark
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
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    work = out.parent / work_folder.PARTIAL
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


# ---- kept files are checked against their markers -------------------------------------------------------
def test_item_markers_record_size_and_sha256_of_their_files(tmp_path, caplog):
    work = tmp_path / work_folder.PARTIAL
    work.mkdir()
    data = {n: np.random.default_rng(i).standard_normal(50).tobytes() for i, n in enumerate(("a.npy", "b.npy"))}
    for n, d in data.items():
        (work / n).write_bytes(d)
    items.mark_done(work / "a.done.json", "k", ["a.npy"])
    items.mark_done(work / "b.done.json", "k", ["b.npy"])
    rec = json.loads((work / "a.done.json").read_text())["files"]["a.npy"]
    import hashlib

    assert rec == {"size": len(data["a.npy"]), "sha256": hashlib.sha256(data["a.npy"]).hexdigest()}
    assert items.item_done(work / "a.done.json", "k", ["a.npy"])
    assert not items.item_done(work / "a.done.json", "other key", ["a.npy"])
    assert not items.item_done(work / "a.done.json", "k", ["a.npy", "c.npy"])  # a file it never recorded
    (work / "a.npy").write_bytes(data["a.npy"][:-8])  # cut short
    with caplog.at_level(logging.WARNING, logger="layergeom"):
        assert not items.item_done(work / "a.done.json", "k", ["a.npy"])
    assert f"a.npy has {len(data['a.npy']) - 8} bytes, its marker recorded {len(data['a.npy'])}" in caplog.text
    (work / "a.npy").write_bytes(data["b.npy"])  # swapped: same size, other content
    assert not items.item_done(work / "a.done.json", "k", ["a.npy"])
    (work / "a.npy").unlink()
    assert not items.item_done(work / "a.done.json", "k", ["a.npy"])
    assert items.item_done(work / "b.done.json", "k", ["b.npy"])


def test_npy_headers_are_checked_against_the_expected_shape(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((6, 4), np.float32))
    assert items.npy_problem(tmp_path / "x.npy", (6, 4), np.float32) is None
    assert "not float16" in items.npy_problem(tmp_path / "x.npy", (6, 4), np.float16)
    assert "(6, 4), not float32 (7, 4)" in items.npy_problem(tmp_path / "x.npy", (7, 4), np.float32)
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "x.npy").write_bytes(data[:-4])
    assert f"has {len(data) - 4} bytes, not the {len(data)}" in items.npy_problem(tmp_path / "x.npy", (6, 4), "f4")
    (tmp_path / "x.npy").write_bytes(b"garbage")
    assert "no readable .npy header" in items.npy_problem(tmp_path / "x.npy", (6, 4), np.float32)
    assert "missing" in items.npy_problem(tmp_path / "y.npy", (6, 4), np.float32)


def _graph_setup(tmp_path):
    import torch
    from conftest import tiny_model
    from test_topology import _defaults

    from layergeom.adapters import get_adapter
    from layergeom.store import dump_activations

    ad = get_adapter(tiny_model("llama"))
    windows = torch.randint(0, 512, (8, 16), generator=torch.Generator().manual_seed(2)).numpy()
    dump_activations(ad, windows, tmp_path / "acts", batch_size=4)
    names = [b.name for b in ad.boundaries][:3]
    cfg = _defaults(top_k=4, resolution_sweep=[0.1])

    def outs(folder):
        return {k: [folder / f"{n}{s}" for n in names] for k, s in
                (("nodes", ".tsv"), ("edges", ".edges.tsv"), ("sweeps", ".sweep.tsv"))}  # fmt: skip

    return names, cfg, outs


def test_graph_files_swapped_between_boundaries_are_redone(tmp_path, monkeypatch):
    from layergeom.topology import pipeline

    names, cfg, outs = _graph_setup(tmp_path)
    whole, run = outs(tmp_path / "whole"), outs(tmp_path / "graphs")
    pipeline.write_graphs(tmp_path / "acts", names, cfg, 0, **whole)
    real = pipeline.store_topology

    def crash(store, b, *a):
        if b == names[2]:
            raise RuntimeError("injected crash")
        return real(store, b, *a)

    monkeypatch.setattr(pipeline, "store_topology", crash)
    with pytest.raises(RuntimeError, match="injected"):
        pipeline.write_graphs(tmp_path / "acts", names, cfg, 0, **run)
    work = tmp_path / "graphs" / work_folder.PARTIAL
    a, b = work / f"{names[0]}.edges.tsv", work / f"{names[1]}.edges.tsv"
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db), b.write_bytes(da)
    computed = []
    monkeypatch.setattr(pipeline, "store_topology", lambda store, b, *a: computed.append(b) or real(store, b, *a))
    pipeline.write_graphs(tmp_path / "acts", names, cfg, 0, **run)
    assert computed == names  # the two swapped, and the one not done
    for key in run:
        for x, y in zip(run[key], whole[key]):
            assert x.read_bytes() == y.read_bytes(), x.name


def test_graph_resume_key_names_the_threads(tmp_path, monkeypatch):
    """The graph job's key holds the BLAS threads: work of another thread count is redone."""
    from layergeom.topology import pipeline

    names, cfg, outs = _graph_setup(tmp_path)
    run = outs(tmp_path / "graphs")
    real, computed = pipeline.store_topology, []

    def crash(store, b, *a):
        if b == names[1]:
            raise RuntimeError("injected crash")
        return real(store, b, *a)

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(pipeline, "store_topology", crash)
    with pytest.raises(RuntimeError, match="injected"):
        pipeline.write_graphs(tmp_path / "acts", names, cfg, 0, **run)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(pipeline, "store_topology", lambda store, b, *a: computed.append(b) or real(store, b, *a))
    pipeline.write_graphs(tmp_path / "acts", names, cfg, 0, **run)
    assert computed == names


@pytest.mark.parametrize("damage", ["short", "rows", "header"])
def test_a_damaged_activation_store_is_not_resumed(tmp_path, caplog, damage):
    """A store file cut short (a crash mid-write, a full disk) is never re-extended into zeros, nor are rows
    other than those recorded (or a wrong header) resumed: the dump starts afresh, logged, and equals a whole one."""
    from conftest import tiny_model

    from layergeom.adapters import get_adapter
    from layergeom.store import dump_activations

    windows = np.random.default_rng(4).integers(0, 512, (9, 8))
    np.save(tmp_path / "windows.npy", windows)
    adapter = get_adapter(tiny_model("llama"))
    dump_activations(adapter, windows, tmp_path / "whole" / "activations", batch_size=2)
    out = tmp_path / "run" / "activations"
    script = ACTIVATIONS_JOB.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=2, out=str(out),
                                    windows=str(tmp_path / "windows.npy"))  # fmt: skip
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    f = out.parent / work_folder.PARTIAL / "activations" / "L0.mlp.npy"
    data = bytearray(f.read_bytes())
    if damage == "short":
        f.write_bytes(bytes(data[: len(data) // 3]))
    elif damage == "rows":
        data[200] ^= 0xFF  # one byte of the first row (the header is 128 bytes): same size, other content
        f.write_bytes(bytes(data))
    else:
        np.save(f, np.zeros((9 * 8, 3), np.float32))  # another shape
    firsts, real = [], adapter.capture
    adapter.capture = lambda ids: firsts.append(ids.shape[0]) or real(ids)
    with caplog.at_level(logging.WARNING, logger="layergeom"):
        dump_activations(adapter, windows, out, batch_size=2, snapshot_s=0, resume_inputs=[tmp_path / "windows.npy"])
    assert firsts == [2, 2, 2, 2, 1]  # from window 0
    assert "is damaged" in caplog.text and "L0.mlp.npy" in caplog.text
    assert _store_bytes(out) == _store_bytes(tmp_path / "whole" / "activations")


# ---- one instance per job ---------------------------------------------------------------------------------
def _foreign_lock(work, job, **holder):
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{job}.lock").write_text(json.dumps({"job": job, "since": "2026-01-01T00:00:00+00:00", **holder}))


def test_a_second_instance_of_a_job_is_refused_naming_the_holder(tmp_path):
    """An orphaned instance still running (here: a live process) holds the lock; the restarted job refuses."""
    import socket

    from layergeom.runtime import LayergeomError

    work = tmp_path / work_folder.PARTIAL
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = work_folder._process_start(holder.pid)
        _foreign_lock(work, "schur", pid=holder.pid, host=socket.gethostname(), start=start)
        snap = snapshots.Snapshots(work, "schur", "k", every_s=0)
        with pytest.raises(LayergeomError) as err:
            snap.load()
        msg = str(err.value)
        assert "\n" not in msg and f"pid {holder.pid} on {socket.gethostname()}" in msg and "schur.lock" in msg
        assert snapshots.Snapshots(work, "cumulative", "k", every_s=0).load() is None  # another job: its own lock
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_lock_is_taken_over(tmp_path, caplog, monkeypatch):
    """A dead PID on this host is stale at once; another host's lock when it has not been refreshed for
    LOCK_STALE_S (its holder refreshes it every HEARTBEAT_S)."""
    import os
    import socket

    from layergeom.runtime import LayergeomError

    work = tmp_path / work_folder.PARTIAL
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _foreign_lock(work, "schur", pid=dead.pid, host=socket.gethostname(), start="1")
    with caplog.at_level(logging.WARNING, logger="layergeom"):
        snap = snapshots.Snapshots(work, "schur", "k", every_s=0)
        assert snap.load() is None
    assert f"taking over the stale lock {work / 'schur.lock'} (pid {dead.pid}" in caplog.text
    assert json.loads((work / "schur.lock").read_text())["pid"] == os.getpid()
    snap.save(1, lambda: {"x": 1})
    snap.clear()
    assert not work.exists()  # released with the work
    _foreign_lock(work, "graphs", pid=1, host="another-node")  # fresh: its holder may be running there
    with pytest.raises(LayergeomError, match="pid 1 on another-node"):
        work_folder.WorkLock.hold(work, "graphs")
    old = time.time() - work_folder.LOCK_STALE_S - 1
    os.utime(work / "graphs.lock", (old, old))
    lock = work_folder.WorkLock.hold(work, "graphs")
    assert json.loads(lock.path.read_text())["host"] == socket.gethostname()
    monkeypatch.setattr(work_folder, "HEARTBEAT_S", 0.05)  # the holder refreshes its lock
    lock.release()
    lock = work_folder.WorkLock.hold(work, "graphs")
    os.utime(lock.path, (old, old))
    time.sleep(0.5)
    assert time.time() - lock.path.stat().st_mtime < work_folder.LOCK_STALE_S / 2
    lock.release()
    assert not lock.path.exists()


def test_a_snapshot_with_a_damaged_tree_is_removed(tmp_path, caplog):
    """A valid zip whose tree names an array it lacks: removed with a log line, the job starts afresh."""
    work = tmp_path / work_folder.PARTIAL
    snap = snapshots.Snapshots(work, "job", "k", every_s=0)
    snap.save(2, lambda: {"x": np.arange(3)})
    tree = {"__dict__": {"x": {"__array__": "a7"}}}  # the array it names is not in the zip
    meta = json.dumps({"key": "k", "done": 2, "tree": tree, "format": keys.FORMAT})
    with open(snap.path, "wb") as fh:
        np.savez(fh, __meta__=np.array(meta))
    with caplog.at_level(logging.WARNING, logger="layergeom"):
        again = snapshots.Snapshots(work, "job", "k", every_s=0)
        assert again.done == 0 and again.load() is None
    assert "unreadable snapshot" in caplog.text and "KeyError" in caplog.text and not snap.path.exists()


# ---- .partial problems ---------------------------------------------------------------------------------------
def test_a_partial_that_is_a_file_or_unwritable_is_one_line(tmp_path, monkeypatch):
    import os

    from layergeom.runtime import LayergeomError

    (tmp_path / work_folder.PARTIAL).write_text("not a folder")
    with pytest.raises(LayergeomError, match=r"cannot keep work in .*\.partial: it is not a folder; make it a"):
        snapshots.Snapshots(tmp_path / work_folder.PARTIAL, "job", "k", every_s=0).load()
    (tmp_path / work_folder.PARTIAL).unlink()
    (tmp_path / work_folder.PARTIAL).mkdir()
    monkeypatch.setattr(os, "access", lambda *a, **kw: False)  # (root may write anywhere: the check is simulated)
    with pytest.raises(LayergeomError, match=r"cannot keep work in .*\.partial: it is not writable") as err:
        snapshots.Snapshots(tmp_path / work_folder.PARTIAL, "job", "k", every_s=0).load()
    assert "\n" not in str(err.value)


def test_a_failure_while_clearing_keeps_the_finished_result(tmp_path, monkeypatch, caplog):
    """Schur: the table is written, then the snapshot cannot be removed: logged, the result stays."""
    from pathlib import Path

    folder = tmp_path / "jac"
    files = _boundary_files(folder)
    (folder / "names.json").write_text(json.dumps(files.names))
    out = tmp_path / "run" / "schur.tsv"
    real = Path.unlink

    def unlink(self, missing_ok=False):
        if self.name.endswith(".snapshot.npz"):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    with caplog.at_level(logging.WARNING, logger="layergeom"):
        _schur(folder, out, snapshot_s=0)
    monkeypatch.undo()
    assert out.exists() and "could not clear the work folder" in caplog.text
    whole = tmp_path / "whole" / "schur.tsv"
    _schur(folder, whole)
    assert out.read_bytes() == whole.read_bytes()


def test_a_symlinked_partial_leaves_no_link_or_keyed_files(tmp_path):
    folder = tmp_path / "jac"
    files = _boundary_files(folder)
    (folder / "names.json").write_text(json.dumps(files.names))
    elsewhere = tmp_path / "scratch"
    elsewhere.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / work_folder.PARTIAL).symlink_to(elsewhere)
    out = tmp_path / "run" / "schur.tsv"
    _schur(folder, out, snapshot_s=0)
    assert out.exists() and not (tmp_path / "run" / work_folder.PARTIAL).is_symlink()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["schur.tsv"] and not list(elsewhere.iterdir())
