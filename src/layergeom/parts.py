"""The part files of a fanned-out table (spectra.boundaries_per_job): what one job computed, for its gather.

A part is one ``.npz`` of arrays and JSON, read with ``allow_pickle=False`` like every file the workflow reads:
no file it reads runs code. It holds

- the values the job computed: a tree of dicts, lists, numbers, strings, numpy arrays and pandas frames
  (:func:`layergeom.resume.trees.pack`), restored bit for bit, so a gather writes the bytes the one-job route writes;
- a record of the job that wrote it: the part's ``kind``, the file ``format``, the writing ``job`` (its rule),
  its ``settings`` (what it computed with) and the identity of each ``input`` file (its path as the job was
  given it, its size and the sha256 of its first and last MiB: a recomputed Jacobian differs there), with a
  ``key``, the sha256 of all of it.

:func:`read_part` hands back the values, or one :class:`~layergeom.runtime.LayergeomError` naming the file and
what is wrong with it: *unreadable* (truncated, damaged, not a part), *foreign* (another kind of part, another
format, another job's inputs) or *stale* (its inputs changed since it was written, or, among the parts of one
table, other settings than the others'). Snakemake remakes a part that is not there, so the remedy is always
to remove it and rerun.

Writers (``spectral.jobs``): ``table.write_spectra_part``, ``cumulative.write_cumulative_variant``,
``convergence.write_convergence_subset``; readers: their gathers. This module imports no torch.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .resume.trees import pack, unpack
from .runtime import LayergeomError, atomic_path

#: bump when what a part holds changes meaning: parts of another format are refused by their readers
FORMAT = 1
#: the suffix of part files
SUFFIX = ".npz"
#: bytes hashed at each end of an input file (the whole file when it is at most twice this)
ENDS = 1 << 20
_META = "__part__"


def input_id(path) -> dict:
    """An input file's identity: its path as given, its size and the sha256 of its first and last :data:`ENDS`
    bytes (all of it when smaller): cheap on GB Jacobians, and a recomputed file differs there."""
    p = Path(path)
    size = p.stat().st_size
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        if size <= 2 * ENDS:
            h.update(fh.read())
        else:
            h.update(fh.read(ENDS))
            fh.seek(size - ENDS)
            h.update(fh.read(ENDS))
    return {"path": str(path), "size": size, "sha256_ends": h.hexdigest()}


def _key(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _plain(settings: dict | None) -> dict:
    """The settings as JSON writes and reads them (numpy scalars as numbers, tuples as lists)."""
    return json.loads(json.dumps(settings or {}, default=lambda x: x.item() if hasattr(x, "item") else str(x)))


@dataclass
class Part:
    """A part read back: its file, the record of the job that wrote it, and its values."""

    path: Path
    kind: str
    job: str
    settings: dict
    inputs: list[dict]
    key: str
    data: object


def write_part(path, kind: str, data, *, job: str, inputs: Iterable = (), settings: dict | None = None) -> Part:
    """Write a part atomically: `data` (a tree :func:`layergeom.resume.trees.pack` takes) and the record of the `job`
    (its rule) that computed it from `inputs` (files) with `settings`; returns it as :func:`read_part` would."""
    record = {"format": FORMAT, "kind": kind, "job": job, "settings": _plain(settings),
              "inputs": [input_id(p) for p in inputs]}  # fmt: skip
    key = _key(record)
    tree, arrays = pack(data)
    meta = json.dumps({**record, "key": key, "tree": tree})
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, array in {_META: np.array(meta), **arrays}.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(array), allow_pickle=False)
    return Part(Path(path), kind, job, record["settings"], record["inputs"], key, data)


def _remedy(path, job: str | None) -> str:
    return f"remove it and rerun{f' (its {job} job makes it again)' if job else ''}"


def read_part(path, kind: str, *, inputs: Iterable | None = None, job: str | None = None, _ids=None) -> Part:
    """The part at `path`, which must be a `kind` part of this :data:`FORMAT`; with `inputs` (the files the
    table is computed from now), every input the part was computed from must be one of them, unchanged since.
    One LayergeomError naming the file otherwise (`job`: the rule that writes such parts, for the message)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            if fh.read(1) == b"\x80":  # pickle protocol 2 and later: never unpickled
                raise LayergeomError(f"{path} is not a {kind} part: a pickle (a part of an older version; a pickle "
                                     f"can run code and is never read); {_remedy(path, job)}")  # fmt: skip
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z[_META]))
            arrays = {k: z[k] for k in z.files if k != _META}
        record = {k: meta[k] for k in ("format", "kind", "job", "settings", "inputs")}
    except FileNotFoundError:
        raise LayergeomError(f"{path}: no such {kind} part; rerun{f' its {job} job' if job else ''}") from None
    except LayergeomError:
        raise
    except Exception as err:  # noqa: BLE001 -- torn zip, bad CRC, not a zip, no record, bad JSON: all unreadable
        reason = " ".join(str(err).split()) or type(err).__name__
        raise LayergeomError(f"{path} is not a readable {kind} part (truncated or damaged: {type(err).__name__}: "
                             f"{reason}); {_remedy(path, job)}") from None  # fmt: skip
    job = job or record["job"]
    if record["kind"] != kind:
        raise LayergeomError(f"{path} is a {record['kind']} part (of a {record['job']} job), not a {kind} part; "
                             f"{_remedy(path, job)}")  # fmt: skip
    if record["format"] != FORMAT:
        raise LayergeomError(f"{path} is a {kind} part of format {record['format']}, this code reads format "
                             f"{FORMAT}; {_remedy(path, job)}")  # fmt: skip
    if meta.get("key") != _key(record):
        raise LayergeomError(f"{path}: its record does not match its key (a damaged or edited part); "
                             f"{_remedy(path, job)}")  # fmt: skip
    if inputs is not None:
        _check_inputs(path, record["inputs"], inputs, job, {} if _ids is None else _ids)
    try:
        data = unpack(meta["tree"], arrays)
    except Exception as err:  # noqa: BLE001 -- a tree naming arrays it lacks
        raise LayergeomError(f"{path} is not a readable {kind} part (damaged values: {type(err).__name__}: {err}); "
                             f"{_remedy(path, job)}") from None  # fmt: skip
    return Part(path, kind, record["job"], record["settings"], record["inputs"], meta["key"], data)


def _check_inputs(path: Path, recorded: list[dict], inputs: Iterable, job: str, ids: dict) -> None:
    """Each input a part recorded must be among `inputs` and unchanged (size, sha256 of its ends); `ids` caches
    the current identities across the parts of one table."""
    now = {str(p): p for p in inputs}
    for rec in recorded:
        name = rec.get("path")
        if name not in now:
            raise LayergeomError(f"{path} was computed from {name}, which is not an input of this table: a part "
                                 f"of another checkpoint or model (foreign); {_remedy(path, job)}")  # fmt: skip
        if name not in ids:
            try:
                ids[name] = input_id(now[name])
            except OSError as err:
                raise LayergeomError(f"{name}: cannot read it ({err.strerror or err}), an input of {path}") from None
        if ids[name]["size"] != rec.get("size") or ids[name]["sha256_ends"] != rec.get("sha256_ends"):
            raise LayergeomError(f"{path} is stale: {name} has changed since the part was computed from it "
                                 f"({rec.get('size')} -> {ids[name]['size']} bytes, or other content); "
                                 f"{_remedy(path, job)}")  # fmt: skip


def read_parts(paths: Iterable, kind: str, *, inputs: Iterable | None = None, job: str | None = None) -> list[Part]:
    """The parts of one table (:func:`read_part` each, the inputs hashed once), which must share their settings:
    a part computed with other settings than the first is stale."""
    inputs = None if inputs is None else list(inputs)
    ids: dict = {}
    out = [read_part(p, kind, inputs=inputs, job=job, _ids=ids) for p in paths]
    for part in out[1:]:
        if part.settings != out[0].settings:
            diff = sorted(k for k in {*part.settings, *out[0].settings}
                          if part.settings.get(k) != out[0].settings.get(k))  # fmt: skip
            raise LayergeomError(
                f"{part.path} is stale: computed with other settings than {out[0].path} ("
                + ", ".join(f"{k} {part.settings.get(k)!r} vs {out[0].settings.get(k)!r}" for k in diff)
                + f"); {_remedy(part.path, job or part.job)}"
            )
    return out
