"""GPU jobs on a workstation: each concurrent GPU job gets its own device (a slot -> CUDA_VISIBLE_DEVICES), a GPU
job whose torch sees no GPU stops at once, and the device is logged. Fake devices: an `nvidia-smi` on PATH that
lists two GPUs, and a monkeypatched torch.cuda."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT

from layergeom import runtime, workflow
from layergeom.runtime import claim_gpus, device_info, resolve_device

# a process that takes a slot (claim_gpus, as a job's start does), reports it and holds it until told to go
HOLDER = """
import os, sys, time
from pathlib import Path
from layergeom.runtime import claim_gpus
claim_gpus(int(sys.argv[1]))
tmp = Path(sys.argv[2] + ".tmp")  # written, then renamed: the test reads the file as soon as it exists
tmp.write_text(os.environ["CUDA_VISIBLE_DEVICES"])
tmp.replace(sys.argv[2])
while not Path(sys.argv[3]).exists():
    time.sleep(0.05)
"""


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    """A host with two fake GPUs (nvidia-smi lists them), no CUDA_VISIBLE_DEVICES, its own slot folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Fake A (UUID: GPU-aaaa)'\necho 'GPU 1: Fake B (UUID: GPU-bbbb)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for name in ("CUDA_VISIBLE_DEVICES", runtime.GPUS_GIVEN, runtime.ALLOW_CPU_FALLBACK):
        monkeypatch.setenv(name, "")  # recorded, so that what a job sets here is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv(runtime.GPU_LOCK_DIR, str(tmp_path / "slots"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    return tmp_path


class Holders:
    """Processes that each hold the slots of one job until `release`."""

    def __init__(self, folder: Path):
        self.folder, self.procs = folder, {}

    def start(self, name: str, n: int = 1) -> str:
        out, go = self.folder / f"{name}.out", self.folder / f"{name}.go"
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(n), str(out), str(go)], stderr=subprocess.PIPE)
        self.procs[name] = p
        deadline = time.monotonic() + 120
        while not out.exists():
            assert p.poll() is None, p.stderr.read().decode()
            assert time.monotonic() < deadline, f"{name} took no slot"
            time.sleep(0.05)
        return out.read_text()

    def release(self, name: str) -> None:
        (self.folder / f"{name}.go").touch()
        assert self.procs.pop(name).wait(60) == 0

    def close(self):
        for name in list(self.procs):
            self.release(name)


@pytest.fixture
def holders(two_gpus):
    h = Holders(two_gpus)
    yield h
    h.close()


def test_two_concurrent_jobs_see_different_devices(holders):
    a, b = holders.start("a"), holders.start("b")
    assert {a, b} == {"0", "1"}
    c = holders.start("c")  # more jobs than GPUs (--resources gpu=3 on two): they share, spread evenly
    assert c in ("0", "1")
    holders.release("a")
    d = holders.start("d")  # a's device is free again: the least used one
    assert d == a
    holders.release("b")
    holders.release("c")
    holders.release("d")


def test_a_job_given_two_gpus_gets_both(holders):
    assert holders.start("ab", n=2) == "0,1"
    assert holders.start("c") in ("0", "1")


def test_the_users_devices_are_the_ones_shared_out(holders, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the user gave this run GPUs 2 and 3
    assert {holders.start("a"), holders.start("b")} == {"2", "3"}


def test_an_executors_devices_are_left_alone(two_gpus):
    env = {"CUDA_VISIBLE_DEVICES": "3", runtime.GPU_LOCK_DIR: str(two_gpus / "slots")}  # SLURM gave GPU 3
    assert claim_gpus(1, env) == ["3"] and env["CUDA_VISIBLE_DEVICES"] == "3"
    assert not (two_gpus / "slots").exists()
    env = {}
    assert claim_gpus(0, env) == [] and env == {}  # a CPU job takes nothing


# ---- a GPU job whose torch sees no GPU -------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def torch_state_restored():
    """``workflow.job`` sets torch's thread count and deterministic mode for the process: restore them, so the
    tests after these (resume keys name the thread count) see the process as it was."""
    import torch

    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(det)


def fake_job(tmp_path: Path, gpu: int):
    """What a Snakemake script's `snakemake` object offers workflow.job."""
    return SimpleNamespace(log=[str(tmp_path / "job.log")], rule="activations", threads=1,
                           resources=SimpleNamespace(gpu=gpu))  # fmt: skip


@pytest.mark.parametrize("cuda_build", [None, "11.8"])  # a CPU build; a build for a CUDA the driver lacks
@pytest.mark.parametrize("visible", [None, "", "0"])
def test_a_gpu_job_on_a_torch_without_cuda_fails_at_once(two_gpus, monkeypatch, cuda_build, visible):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", cuda_build)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    ran = []
    with pytest.raises(SystemExit) as err, workflow.job(fake_job(two_gpus, gpu=1)):
        ran.append(True)
    assert not ran, "the job body ran"
    msg = str(err.value)
    assert "\n" not in msg and "sees no CUDA device" in msg and "device: cpu" in msg
    assert ("a CPU build" if cuda_build is None else "built for CUDA 11.8") in msg
    assert "sees no CUDA device" in (two_gpus / "job.log").read_text()


def test_a_cpu_job_and_the_fallback_run(two_gpus, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with workflow.job(fake_job(two_gpus, gpu=0)):  # no gpu resource: nothing claimed, nothing checked
        assert "CUDA_VISIBLE_DEVICES" not in os.environ
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # inherited from the run by a CPU job (corpus, windows)
    with workflow.job(fake_job(two_gpus, gpu=0)):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv(runtime.ALLOW_CPU_FALLBACK, "1")
    with workflow.job(fake_job(two_gpus, gpu=1)):
        assert os.environ["CUDA_VISIBLE_DEVICES"] in ("0", "1")
        assert resolve_device("auto") == "cpu"
    assert "Running on the CPU" in (two_gpus / "job.log").read_text()


def test_a_gpu_job_takes_its_slot_and_logs_its_device(two_gpus, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Fake H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    with workflow.job(fake_job(two_gpus, gpu=1)):
        slot = os.environ["CUDA_VISIBLE_DEVICES"]
        assert resolve_device("auto") == "cuda"
        info = device_info("cuda")
    assert slot in ("0", "1")
    assert info == {"type": "cuda", "name": "Fake H200", "torch": torch.__version__, "cuda": "12.8",
                    "capability": "9.0"}  # fmt: skip
    log = (two_gpus / "job.log").read_text()
    assert f"cuda_visible_devices={slot}" in log
    assert f"device: cuda Fake H200 (torch {torch.__version__}, CUDA build 12.8, CUDA_VISIBLE_DEVICES={slot})" in log
    json.dumps(info)  # goes into store.json and the manifest


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_a_lock_folder_that_names_a_file_is_one_line_in_the_jobs_log(two_gpus, monkeypatch, where):
    (two_gpus / "taken").write_text("not a folder\n")
    folder = two_gpus / "taken" if where == "file" else two_gpus / "taken" / "slots"
    monkeypatch.setenv(runtime.GPU_LOCK_DIR, str(folder))
    with pytest.raises(runtime.LayergeomError) as err:
        claim_gpus(1)
    msg = str(err.value)
    assert f"cannot keep the GPU slot locks in {folder} ($LAYERGEOM_GPU_LOCK_DIR)" in msg and "\n" not in msg
    assert "set LAYERGEOM_GPU_LOCK_DIR to a writable folder" in msg
    with pytest.raises(SystemExit, match="layergeom: cannot keep the GPU slot locks"):
        with workflow.job(fake_job(two_gpus, gpu=1)):
            raise AssertionError("the job body must not run")
    assert (two_gpus / "job.log").read_text().rstrip().splitlines()[-1].endswith(msg)
    assert (two_gpus / "taken").read_text() == "not a folder\n"
