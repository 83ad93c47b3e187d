"""The fan-out's part files (layergeom.parts): arrays and JSON, never a pickle; each checked against the job that
wrote it, with one error naming the file for a truncated, foreign or stale part; and the work a killed part job
of other settings left in its work folder is removed when the stage runs again (work_folder.remove_unowned)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import zipfile

import forked
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT
from test_fanout import KW, NAMES, _bytes, _fanned, _files, _single, jac  # noqa: F401 -- jac: a fixture
from test_resume import KILL_AT_SNAPSHOT

from layergeom import parts
from layergeom.resume import work_folder
from layergeom.runtime import LayergeomError


def _tree():
    """What part jobs hold: rows of numpy and Python scalars, nan, inf, None, strings; frames of every dtype."""
    rows = [{"boundary": "L0.attn", "cond": np.float64(3.5), "n": np.int64(4), "ok": np.bool_(True),
             "f32": np.float32(0.1), "inf": float("inf"), "nan": float("nan"), "none": None, "c": 1 + 2j}]  # fmt: skip
    frame = pd.DataFrame({"boundary": ["L0.attn", "L0.mlp"], "index": np.arange(2), "real": [0.5, -np.inf],
                          "nonzero": [True, False], "f32": np.array([1.5, 2], dtype=np.float32)})  # fmt: skip
    return {"rows": rows, "eig": [frame, frame.iloc[:0]], "counts": [3, 4], "variant": "update"}


def _same(a, b):
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
        assert list(a.dtypes) == list(b.dtypes)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    else:
        assert a == b and (type(b) is type(a) or type(a).__module__ == "numpy"), (a, b)


def test_a_part_is_arrays_and_json_restored_as_written(tmp_path):
    (tmp_path / "in.npy").write_bytes(b"x" * 10)
    written = parts.write_part(tmp_path / "p.npz", "spectra", _tree(), job="j", inputs=[tmp_path / "in.npy"],
                               settings={"sr_k": np.int64(2), "dtype": "float64"})  # fmt: skip
    with zipfile.ZipFile(tmp_path / "p.npz") as zf:  # .npy members only: np.load(allow_pickle=False) reads them
        assert all(n.endswith(".npy") for n in zf.namelist())
    got = parts.read_part(tmp_path / "p.npz", "spectra", inputs=[tmp_path / "in.npy"])
    _same(_tree(), got.data)
    assert type(got.data["rows"][0]["f32"]) is np.float32
    assert got.settings == {"sr_k": 2, "dtype": "float64"} and got.key == written.key and got.job == "j"
    assert got.inputs == [{"path": str(tmp_path / "in.npy"), "size": 10,
                           "sha256_ends": parts.input_id(tmp_path / "in.npy")["sha256_ends"]}]  # fmt: skip


def test_an_input_is_known_by_its_size_and_both_ends(tmp_path):
    big = np.zeros(3 * parts.ENDS, dtype=np.uint8)
    np.save(tmp_path / "a.npy", big)
    a = parts.input_id(tmp_path / "a.npy")
    big[-1] = 1  # a change at the end
    np.save(tmp_path / "a.npy", big)
    assert parts.input_id(tmp_path / "a.npy") != a
    big[-1], big[0] = 0, 1  # and at the start
    np.save(tmp_path / "a.npy", big)
    assert parts.input_id(tmp_path / "a.npy") != a


@pytest.fixture
def spectra_parts(jac, tmp_path):  # noqa: F811
    """tmp_path/fan: spectra parts of 3 boundaries each (.npz), and the Jacobian files they were computed from."""
    written = _fanned(jac, tmp_path / "fan", 3)
    inputs = [p for n in NAMES for p in (jac / f"{n}.npy", jac / f"{n}.groups.npy", jac / f"{n}.json")]
    return written, inputs


def _gather(written, out, inputs):
    from layergeom.spectral.jobs.table import gather_spectra

    gather_spectra(written, NAMES, out / "spectra.tsv", out / "eigenvalues.tsv", inputs=inputs)


def _refused(written, tmp_path, inputs, match):
    out = tmp_path / "bad"
    with pytest.raises(LayergeomError, match=match) as err:
        _gather(written, out, inputs)
    assert "\n" not in str(err.value)
    assert not out.exists() or not list(out.iterdir())  # nothing half-written
    return str(err.value)


def test_the_gather_checks_the_inputs_and_writes_the_one_jobs_bytes(jac, tmp_path, spectra_parts):  # noqa: F811
    written, inputs = spectra_parts
    _single(jac, tmp_path / "one")
    _gather(written, tmp_path / "again", inputs)
    assert _bytes(tmp_path / "again") == _bytes(tmp_path / "one")


@pytest.mark.parametrize("keep", [0, 100, 0.5, -30], ids=["empty", "head", "half", "tail-cut"])
def test_a_truncated_part_is_one_line(tmp_path, spectra_parts, keep):
    written, inputs = spectra_parts
    data = written[1].read_bytes()
    written[1].write_bytes(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    msg = _refused(written, tmp_path, inputs, r"1\.npz is not a readable spectra part \(truncated or damaged")
    assert "remove it and rerun (its spectra_table_part job makes it again)" in msg


def test_a_pickled_part_is_refused_unread(tmp_path, spectra_parts):
    """A part of the old pickle format, or a crafted one: refused by its first byte, never unpickled."""
    written, inputs = spectra_parts
    sentinel = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(sentinel), "w"))

    written[0].write_bytes(pickle.dumps({"rows": Payload()}, protocol=pickle.HIGHEST_PROTOCOL))
    _refused(written, tmp_path, inputs, r"0\.npz is not a spectra part: a pickle .* never read")
    written[0].write_bytes(b"x" + pickle.dumps({"rows": Payload()}))  # not a pickle's first byte: still not loaded
    _refused(written, tmp_path, inputs, r"0\.npz is not a readable spectra part")
    assert not sentinel.exists()


def test_a_part_of_another_kind_or_checkpoint_is_foreign(jac, tmp_path, spectra_parts):  # noqa: F811
    from test_fanout_chains import _cum_variant

    written, inputs = spectra_parts
    _cum_variant(jac, tmp_path / "cum", "update")
    cum = tmp_path / "cum" / "parts" / "cumulative" / "update.npz"
    msg = _refused([written[0], cum, written[2]], tmp_path, inputs, r"is a cumulative part \(of a "
                   r"spectra_cumulative_variant job\), not a spectra part")  # fmt: skip
    assert "update.npz" in msg
    other = tmp_path / "other"  # another checkpoint: the same boundaries, its own files
    other.mkdir()
    for p in jac.iterdir():
        (other / p.name).write_bytes(p.read_bytes())
    foreign = _fanned(other, tmp_path / "o" / "fan", 3)  # its parts in tmp_path/o/parts
    _refused([written[0], foreign[1], written[2]], tmp_path, inputs,
             r"o/parts/1\.npz was computed from .*/other/L1\.mlp\.npy, which is not an input of this table")  # fmt: skip


def test_a_part_whose_inputs_changed_is_stale(jac, tmp_path, spectra_parts):  # noqa: F811
    written, inputs = spectra_parts
    J = np.load(jac / "L3.attn.npy")
    np.save(jac / "L3.attn.npy", J * 2)  # the Jacobian job ran again: block 2 (L3.attn, L3.mlp, L4.attn) is stale
    _refused(written, tmp_path, inputs, r"2\.npz is stale: .*L3\.attn\.npy has changed since the part was computed")


def test_parts_computed_with_other_settings_are_stale(jac, tmp_path, spectra_parts):  # noqa: F811
    from layergeom.spectral.jobs.table import write_spectra_part

    written, inputs = spectra_parts
    write_spectra_part(_files(jac, NAMES[3:6]), written[1], **KW | {"ci_level": 0.9})
    _refused(written, tmp_path, inputs, r"1\.npz is stale: computed with other settings than .*0\.npz \(ci_level")


def test_an_edited_record_or_another_format_is_refused(tmp_path, spectra_parts):
    written, inputs = spectra_parts
    with np.load(written[0], allow_pickle=False) as z:
        members = {k: z[k] for k in z.files}
    meta = json.loads(str(members["__part__"]))

    def rewrite(**change):
        m = {**meta, **change}
        with zipfile.ZipFile(written[0], "w") as zf:
            for k, a in {**members, "__part__": np.array(json.dumps(m))}.items():
                with zf.open(f"{k}.npy", "w") as fh:
                    np.lib.format.write_array(fh, a, allow_pickle=False)

    rewrite(settings={**meta["settings"], "sr_k": 3})
    _refused(written, tmp_path, inputs, r"0\.npz: its record does not match its key")
    rewrite(format=parts.FORMAT + 1)
    _refused(written, tmp_path, inputs, rf"0\.npz is a spectra part of format {parts.FORMAT + 1}, this code reads")
    rewrite(kind="spectra", tree={"__dict__": {"rows": {"__array__": "a99"}}})
    _refused(written, tmp_path, inputs, r"0\.npz is not a readable spectra part \(damaged values")


# ---- work that no job of the current settings owns ---------------------------------------------------------
def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _lock(work, name, pid, host=None, age=0.0):
    import socket

    path = work / f"{name}.lock"
    path.write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(), "start": None, "job": name}))
    if age:
        os.utime(path, (path.stat().st_atime - age, path.stat().st_mtime - age))
    return path


def test_remove_unowned_removes_only_the_work_of_jobs_the_settings_lack(tmp_path):
    work = tmp_path / ".partial"
    work.mkdir()
    dead = _dead_pid()
    files = {
        "owned": ["schur_chain_run_none_a0.snapshot.npz", "schur_chain_run_none_a0.lock"],
        "gone": [
            "schur_chain_run_none_a0.5.snapshot.npz",
            "schur_chain_run_none_a0.5.lock",
            ".schur_chain_run_none_a0.5.snapshot.npz.abcd_123",
            "schur_prep_3.b0.npz",
            "schur_prep_3.b1.npz",
            f".cumulative_full.lock.{__import__('socket').gethostname()}.{dead}",
        ],  # fmt: skip
        "live": ["spectra_part_7.snapshot.npz", "spectra_part_7.lock"],
        "other-host": ["convergence_9.snapshot.npz", "convergence_9.lock"],
        "unknown": ["notes.txt", "L0.attn.npy"],
    }
    for group, names in files.items():
        for n in names:
            if n.endswith(".abcd_123"):
                (work / n).mkdir()
                (work / n / "x").write_text("half a snapshot")
            else:
                (work / n).write_text(group)
    _lock(work, "schur_chain_run_none_a0", dead)
    _lock(work, "schur_chain_run_none_a0.5", dead)  # a killed job: its PID is no longer running
    _lock(work, "spectra_part_7", os.getpid())  # a live job of the old settings: left alone
    _lock(work, "convergence_9", 1, host="another-node", age=60)  # refreshed a minute ago on another host
    removed = work_folder.remove_unowned(work, ["schur_chain_run_none_a0", "spectra_part_0"])
    left = sorted(p.name for p in work.iterdir())
    assert sorted(p.name for p in removed) == sorted(files["gone"])
    assert left == sorted(files["owned"] + files["live"] + files["other-host"] + files["unknown"])
    assert (work / "spectra_part_7.lock").exists() and json.loads((work / "spectra_part_7.lock").read_text())[
        "pid"] == os.getpid()  # fmt: skip
    assert work_folder.remove_unowned(tmp_path / "nowhere", []) == []


@pytest.mark.parametrize("name,owner", [
    ("spectra_part_2.snapshot.npz", "spectra_part_2"), ("schur_chain_run_none_a0.5_0_3.lock", "schur_chain_run_none_a0.5_0_3"),
    (".cumulative_full.snapshot.npz.k2j_x9ab", "cumulative_full"), (".x.y.lock.node-1.cluster.4242", "x.y"),
    ("schur_prep_0.b12.npz", "schur_prep_0"), ("L0.attn.done.json", None), ("notes.txt", None),
])  # fmt: skip
def test_work_owner_reads_the_job_from_a_work_files_name(name, owner):
    assert work_folder.work_owner(name) == owner


SETUP = (
    KILL_AT_SNAPSHOT
    + """
from pathlib import Path
from layergeom.spectral.jobs.table import write_spectra_part
from test_fanout import KW, _files
write_spectra_part(_files(Path({folder!r}), {block!r}), Path({part!r}), snapshot_s=0, **KW)
"""
)


def test_a_killed_parts_work_goes_when_the_settings_no_longer_have_it(jac, tmp_path):  # noqa: F811
    """Blocks of 2 boundaries: block 2 (L2.attn, L2.mlp) is killed after its first snapshot (its snapshot and lock
    stay in parts/.partial/); then spectra.boundaries_per_job 4 (blocks 0 and 1 only): the first part job removes
    block 2's work, and the gather writes the one job's bytes."""
    from layergeom.spectral.jobs.table import gather_spectra, write_spectra_part

    fan = tmp_path / "fan" / "parts"
    script = SETUP.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=2, folder=str(jac),
                          block=NAMES[4:6], part=str(fan / "2.npz"))  # fmt: skip
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    partial = fan / work_folder.PARTIAL
    assert sorted(p.name for p in partial.iterdir()) == ["spectra_part_2.lock", "spectra_part_2.snapshot.npz"]
    blocks = [NAMES[0:4], NAMES[4:7]]
    new = [fan / f"{k}.npz" for k in range(2)]
    for block, part in zip(blocks, new):
        write_spectra_part(_files(jac, block), part, snapshot_s=0, siblings=new, **KW)
    assert not partial.exists()  # block 2's snapshot and lock removed, the new parts' own work cleared
    _single(jac, tmp_path / "one")
    gather_spectra(new, NAMES, tmp_path / "out" / "spectra.tsv", tmp_path / "out" / "eigenvalues.tsv")
    assert _bytes(tmp_path / "out") == _bytes(tmp_path / "one")


def test_a_killed_variants_work_stays_for_its_own_rerun(jac, tmp_path):  # noqa: F811
    """The work of a job the settings still have is its own: a sibling's start leaves it, and it resumes."""
    from test_fanout_chains import CUMULATIVE_KW, _cum_variant

    from layergeom.spectral.jobs.cumulative import write_cumulative_variant

    out = tmp_path / "fan" / "parts" / "cumulative"
    script = (KILL_AT_SNAPSHOT + """
from pathlib import Path
from test_fanout_chains import _cum_variant
_cum_variant(Path({folder!r}), Path({out!r}), "full", snapshot_s=0)
""").format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=2, folder=str(jac), out=str(tmp_path / "fan"))  # fmt: skip
    assert forked.run(script).returncode == -signal.SIGKILL
    siblings = [out / "update.npz", out / "full.npz"]
    write_cumulative_variant(_files(jac, NAMES), siblings[0], variant="update", snapshot_s=0,
                             siblings=siblings, **CUMULATIVE_KW)  # fmt: skip
    assert (out / work_folder.PARTIAL / "cumulative_full.snapshot.npz").exists()
    _cum_variant(jac, tmp_path / "fan", "full", snapshot_s=0)
    assert not (out / work_folder.PARTIAL).exists()


@pytest.mark.dag
def test_a_damaged_part_stops_the_workflows_gather_with_one_line_in_its_log(tmp_path):
    """tiny-gpt2's table fanned out (a part per boundary) by the workflow; a part cut short afterwards (newer
    than the table: Snakemake gathers again) stops the gather: exit non-zero, the part named on the last line of
    logs/spectra_table_gather/..., no spectra.tsv."""
    from lg_runs import snakemake
    from test_fanout import _jobs

    target = "results/tiny-gpt2/init/spectra.tsv"
    _jobs(tmp_path, {"spectra": {"boundaries_per_job": 1}}, target=target)  # writes tmp_path/config.yaml
    run = tmp_path / "run"
    snakemake(run, target, config=tmp_path / "config.yaml")
    part = run / "results" / "tiny-gpt2" / "init" / "parts" / "spectra" / "1.npz"
    part.write_bytes(part.read_bytes()[:200])
    res = snakemake(run, target, config=tmp_path / "config.yaml", check=False)
    assert res.returncode != 0
    log = (run / "logs" / "spectra_table_gather" / "tiny-gpt2" / "init.log").read_text().rstrip().splitlines()
    assert "parts/spectra/1.npz is not a readable spectra part (truncated or damaged" in log[-1]
    assert "remove it and rerun" in log[-1] and not (run / target).exists()
