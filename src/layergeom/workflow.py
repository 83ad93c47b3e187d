"""The glue every Snakemake script shares: logging into the rule's log, seeds and threads."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys

from .runtime import (
    LayergeomError,
    check_given_gpus,
    claim_gpus,
    log_failures,
    set_determinism,
    setup_logging,
    write_failure,
)

log = logging.getLogger("layergeom")


@contextlib.contextmanager
def job(snakemake, seed: int | None = None, threads: int | None = None, uses_torch: bool = False):
    """Run a script body with stderr and logging sent to ``snakemake.log[0]`` and RNGs seeded.

    A LayergeomError (bad input) is logged as one clear line and ends the job with that message; any other
    failure leaves its traceback in the log, then its one-line reason last (``runtime.write_failure``), and
    propagates (Snakemake's console shows it too). Failures before the job starts (a failing import) reach the
    log through ``runtime.log_script_failures``, which the first ``layergeom`` import of a script sets up.
    ``uses_torch``: import torch (after the GPU slot is taken) so that it is seeded and its threads pinned, for a
    job whose library modules import it only when they compute.
    """
    logfile = snakemake.log[0] if len(snakemake.log) else None
    rule = getattr(snakemake, "rule", None)
    setup_logging(logfile)
    if logfile:
        log_failures(logfile, rule)  # also for this process's crashes (faulthandler) and uncaught errors
    stream = open(logfile, "a", buffering=1) if logfile else None  # noqa: SIM115
    old = sys.stderr
    if stream:
        sys.stderr = stream
    try:
        # a GPU job takes its own device (CUDA_VISIBLE_DEVICES) before torch initialises CUDA
        gpus = job_gpus(snakemake)
        claim_gpus(gpus)
        env = {k: os.environ.get(k, "") for k in ("SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES")}
        log.info(
            "job rule=%s host=%s slurm_job_id=%s cuda_visible_devices=%s",
            getattr(snakemake, "rule", "?"),
            socket.gethostname(),
            env["SLURM_JOB_ID"] or "none",
            env["CUDA_VISIBLE_DEVICES"] or "none",
        )
        if gpus:  # a GPU job whose torch sees no GPU stops here, before it loads anything
            check_given_gpus()
        if uses_torch:  # seeded and its threads pinned by set_determinism
            try:
                import torch  # noqa: F401
            except ImportError:
                raise LayergeomError("this job computes with torch, which its environment lacks") from None
        set_determinism(0 if seed is None else seed, threads or getattr(snakemake, "threads", None))
        yield
    except LayergeomError as err:
        log.error("%s", err)
        err._layergeom_logged = True
        sys.stderr = old
        raise SystemExit(f"layergeom: {err}") from None
    except SystemExit as err:
        if err.code not in (None, 0) and logfile:  # a body that exits with a message or status: that is the reason
            if stream:
                stream.flush()
            write_failure(logfile, LayergeomError(f"exited: {err.code}"), rule)
        raise
    except BaseException as err:
        if stream:
            stream.flush()
        if logfile:
            write_failure(logfile, err, rule)
        raise
    finally:
        sys.stderr = old
        if stream:
            stream.close()


def job_gpus(snakemake) -> int:
    """The GPUs the job was given: its `gpu` resource (0 without one)."""
    return int(getattr(getattr(snakemake, "resources", None), "gpu", 0) or 0)


def job_device(snakemake) -> str:
    """The torch device a Paper B analysis job computes on: "cpu" when the job got no GPU (a model narrower
    than `gpu_min_width`, `device: cpu`, a local run without a GPU; rules/common.smk analysis_gpus), else its
    settings' `device` resolved (``runtime.resolve_device``: CUDA, or an error when torch sees none). Logged."""
    from .runtime import resolve_device  # imports torch: only the analysis jobs' (torch) envs call this

    return resolve_device(snakemake.params.settings["device"] if job_gpus(snakemake) else "cpu")


def snapshot_seconds(snakemake) -> float:
    """The config's ``snapshot_minutes`` in seconds: how often long jobs save their state (``layergeom.resume``).

    Read from the config, not a rule parameter: it changes no result, so changing it must rerun nothing."""
    return 60.0 * float(snakemake.config.get("snapshot_minutes", 10))
