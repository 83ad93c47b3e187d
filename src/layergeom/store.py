"""Activation store: the residual stream at every boundary for all windows, one .npy memmap per boundary.

Layout of ``results/{model}/{checkpoint}/activations/``:

- ``{boundary}.npy`` (n_tokens, d), rows in (window, position) order, for the kept boundaries and ``final``;
- ``index.npy`` (n_tokens, 3) int64 columns ``window, position, token_id``;
- ``store.json``: the kept names, the model's boundaries, shape, dtype, model and checkpoint.

The store's ``dtype`` is float32 (default), float16 or bfloat16; numpy has no bfloat16, so a bfloat16
store holds the bit patterns as uint16 and readers get float32 (:meth:`ActivationStore.states`, converted
chunk by chunk as rows are read). Statistics over the states accumulate in float64 in their readers.
A store may keep only some boundaries (``activations.boundaries``); reading one it did not keep is an
error that names the setting.

Rows with position 0 (BOS / attention sink) are kept in the files and excluded by ``nonbos``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import mmap
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .names import FINAL, block_input_names, kept_boundaries, parse_boundary  # noqa: F401  (re-exported)
from .runtime import LayergeomError, atomic_path, progress, remove_stale_temporaries

log = logging.getLogger("layergeom")

#: store dtype -> numpy dtype of the .npy files (bfloat16 as its uint16 bit patterns)
STORE_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32, exactly (a bfloat16 is the top half of a float32)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


class Float32View:
    """A reduced-precision memmap read as float32: indexing converts only the rows it reads.

    Supports what the stages do with states: ``v[rows]``, ``v[start:stop]``, ``v.shape``, ``len(v)`` and
    ``np.asarray(v)`` (the whole array, converted). Memory per read ~ the rows read in float32.
    """

    def __init__(self, raw: np.ndarray, dtype: str):
        self.raw, self.store_dtype = raw, dtype
        self.shape, self.ndim, self.dtype = raw.shape, raw.ndim, np.dtype(np.float32)

    def _convert(self, x: np.ndarray) -> np.ndarray:
        if self.store_dtype == "bfloat16":
            return bf16_bits_to_float32(x)
        return np.asarray(x, dtype=np.float32)

    def __getitem__(self, key) -> np.ndarray:
        return self._convert(self.raw[key])

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        out = self._convert(self.raw[:])
        return out if dtype is None else out.astype(dtype, copy=False)


@dataclass
class ActivationStore:
    """Read-only view of an activation dump."""

    path: Path

    def __post_init__(self):
        self.path = Path(self.path)
        self.meta = json.loads((self.path / "store.json").read_text())
        self.index = np.load(self.path / "index.npy")

    @property
    def names(self) -> list[str]:
        """Boundary names in depth order, then ``final``."""
        return list(self.meta["names"])

    @property
    def boundaries(self) -> list[str]:
        """The boundaries this store kept, in depth order."""
        return [n for n in self.names if n != FINAL]

    @property
    def model_boundaries(self) -> list[str]:
        """Every boundary of the model, kept or not (stores written before selections existed keep all)."""
        return list(self.meta.get("model_boundaries", self.boundaries))

    @property
    def dtype(self) -> str:
        """Storage dtype: float32, float16 or bfloat16 (``states`` always returns float32 values)."""
        return str(self.meta.get("dtype", "float32"))

    @property
    def d_model(self) -> int:
        return int(self.meta["d_model"])

    @property
    def n_windows(self) -> int:
        return int(self.meta["n_windows"])

    @property
    def window_tokens(self) -> int:
        return int(self.meta["window_tokens"])

    def states(self, name: str):
        """(n_tokens, d) float32 states of one boundary (or ``final``): the memmap itself for a float32 store,
        a :class:`Float32View` converting the rows read for a float16 or bfloat16 one."""
        self.require([name], "this analysis")
        raw = np.load(self.path / f"{name}.npy", mmap_mode="r")
        return raw if self.dtype == "float32" else Float32View(raw, self.dtype)

    def require(self, names: list[str], what: str) -> None:
        """Stop with a clear message if the store did not keep one of ``names``."""
        missing = [n for n in names if n not in self.names]
        if missing:
            raise LayergeomError(
                f"{what} needs {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} but the activation store "
                f"{self.path} keeps only {len(self.boundaries)} of {len(self.model_boundaries)} boundaries "
                f"(activations.boundaries: {self.meta.get('boundaries_setting', 'all')}); keep them and rerun activations"
            )

    def block_inputs(self) -> list[str]:
        """Names of h_0 .. h_{L-1} (block inputs) followed by ``final`` = h_L: the Paper A transitions."""
        names = block_input_names(self.model_boundaries)
        self.require(names, "the tokenwise stage")
        return names

    @property
    def nonbos(self) -> np.ndarray:
        """Boolean mask of rows that are not position 0."""
        return self.index[:, 1] > 0

    def token_ids(self) -> np.ndarray:
        """(n_windows, window_tokens) token ids."""
        return self.index[:, 2].reshape(self.n_windows, self.window_tokens)


def _first_bad_window(x, start: int, T: int) -> int | None:
    """The window of the first row of x (rows, d) with a NaN or inf, or None."""
    import torch

    fin = torch.isfinite(x).all(dim=1)
    return None if bool(fin.all()) else start + int(torch.nonzero(~fin)[0, 0]) // T


def _to_store(x, dtype: str) -> np.ndarray:
    """A torch tensor (rows, d) already in the store's dtype -> numpy rows (bfloat16 as uint16 bit patterns)."""
    import torch

    if dtype == "bfloat16":
        return x.view(torch.int16).cpu().numpy().view(np.uint16)
    return x.cpu().numpy()


def dump_activations(
    adapter,
    windows: np.ndarray,
    out_dir: str | Path,
    *,
    batch_size: int = 8,
    extra_meta: dict | None = None,
    dtype: str = "float32",
    boundaries="all",
    snapshot_s: float | None = None,
    resume_inputs: list | None = None,
) -> ActivationStore:
    """Stream the residual stream at every kept boundary of all windows (n, T) into per-boundary memmaps.

    Memory stays bounded by one batch of activations whatever the corpus size; a NaN or inf in any
    activation (or a value beyond the range of a float16 store) stops the dump with the boundary and
    window named, and leaves no output behind. dtype is the storage dtype (float32, float16, bfloat16);
    boundaries is ``activations.boundaries`` (:func:`kept_boundaries`).

    With ``snapshot_s`` the dump is resumable (``layergeom.resume``): the store grows in ``.partial/`` next to
    ``out_dir``, and every ``snapshot_s`` seconds its memmaps are flushed and the number of windows done is
    recorded with a key of ``resume_inputs`` (the weights and windows files) and the settings; a job killed in
    the middle goes on from there. A bad input still leaves nothing behind.
    """
    import torch

    if dtype not in STORE_DTYPES:
        raise LayergeomError(f"activations.dtype: '{dtype}' is not one of {', '.join(STORE_DTYPES)}")
    n, T = windows.shape
    model_boundaries = [b.name for b in adapter.boundaries]
    names = kept_boundaries(model_boundaries, boundaries) + [FINAL]
    d = adapter.d_model
    needed = len(names) * n * T * d * np.dtype(STORE_DTYPES[dtype]).itemsize + n * T * 3 * 8  # boundaries + index
    meta = {
        "names": names,
        "model_boundaries": model_boundaries,
        "boundaries_setting": boundaries if isinstance(boundaries, str) else "list",
        "n_windows": n,
        "window_tokens": T,
        "d_model": d,
        "dtype": dtype,
    }
    meta.update(extra_meta or {})

    def fill(tmp: Path, mms: dict, start: int, saved=None) -> None:
        for first in progress(range(start, n, batch_size), desc="activations", unit="batch", initial=start // batch_size,
                              total=-(-n // batch_size)):  # fmt: skip
            ids = torch.as_tensor(windows[first : first + batch_size], dtype=torch.long)
            cap = adapter.capture(ids)
            missing = set(names) - set(cap)
            if missing:
                raise RuntimeError(f"adapter did not capture {sorted(missing)}")
            rows = slice(first * T, (first + ids.shape[0]) * T)
            for nm in names:
                x = cap[nm].reshape(-1, d)  # (rows, d) in the model's dtype
                check_activations(x.float().cpu().numpy(), nm, first, T)  # non-finite, or overflowing float32
                x = x.to(getattr(torch, dtype))  # rounded to the store's dtype once
                bad = _first_bad_window(x, first, T)
                if bad is not None:  # finite in the model, beyond the store's range (float16: 65504)
                    raise LayergeomError(
                        f"activations at boundary {nm}, window {bad} exceed the range of a {dtype} store "
                        f"(largest |value| {float(cap[nm].abs().max()):.3g}); use activations.dtype: bfloat16 or float32"
                    )
                mms[nm][rows] = _to_store(x, dtype)
                release_rows(mms[nm], rows.start, rows.stop)
            if saved is not None:
                saved(first + ids.shape[0])
        for mm in mms.values():
            mm.flush()
        win, pos = np.divmod(np.arange(n * T), T)
        np.save(tmp / "index.npy", np.stack([win, pos, windows.reshape(-1)], axis=1).astype(np.int64))
        (tmp / "store.json").write_text(json.dumps(meta, indent=2) + "\n")

    if snapshot_s is None:
        with atomic_path(out_dir, is_dir=True) as tmp, _disk_full_is_clear(out_dir, needed):
            check_free_space(tmp, needed, out_dir)
            mms = {nm: _reserved_memmap(tmp / f"{nm}.npy", (n * T, d), STORE_DTYPES[dtype]) for nm in names}
            fill(tmp, mms, 0)
            del mms
    else:
        if not resume_inputs:
            raise ValueError("a resumable dump needs resume_inputs: the files its key identifies (weights, windows)")
        settings = {**meta, "batch_size": batch_size, "windows": windows, "device": str(adapter.device),
                    "threads": torch.get_num_threads()}  # fmt: skip
        _resumable_dump(out_dir, fill, names, (n * T, d), dtype, needed, snapshot_s, resume_inputs, settings)
    log.info("dumped %d windows x %d tokens at %d names (%s) to %s", n, T, len(names), dtype, out_dir)
    return ActivationStore(Path(out_dir))


def _rows_sha256(path: Path, start: int, stop: int) -> str:
    """sha256 of rows start..stop of a (rows, d) .npy file, read in chunks of ~64 MB."""
    mm = np.load(path, mmap_mode="r")
    step = max(1, (64 << 20) // max(1, mm[0].nbytes))
    h = hashlib.sha256()
    for a in range(start, stop, step):
        h.update(np.ascontiguousarray(mm[a : min(stop, a + step)]).data)
    return h.hexdigest()


def _kept_windows(tmp: Path, marker: Path, key: str, names, shape, np_dtype, T: int) -> tuple[int, dict]:
    """The windows done of a killed dump and the row segments its marker recorded, if its files still hold them
    (each memmap's header, shape and size, and each segment's sha256); else (0, {}), logged."""
    from .resume.items import item_done, npy_problem

    if not item_done(marker, key):
        return 0, {}
    rec = json.loads(marker.read_text())
    done, segments = int(rec["windows_done"]), rec.get("segments", {})
    for nm in names:
        problem = npy_problem(tmp / f"{nm}.npy", shape, np_dtype)
        segs = segments.get(nm, [])
        if problem is None and sum(b - a for a, b, _ in segs) != done * T:
            problem = f"{nm}.npy: its marker records {sum(b - a for a, b, _ in segs)} rows, not {done * T}"
        for a, b, digest in segs if problem is None else ():
            if _rows_sha256(tmp / f"{nm}.npy", a, b) != digest:
                problem = f"{nm}.npy: rows {a}..{b} are not those its marker recorded (another sha256)"
                break
        if problem:
            log.warning("activations: the store in %s is damaged (%s); starting afresh", tmp, problem)
            return 0, {}
    return done, segments


def _resumable_dump(out_dir, fill, names, shape, dtype, needed, snapshot_s, inputs, settings) -> None:
    """dump_activations' resumable path: the store grows in .partial/<name>/, and <name>.progress.json holds the
    key, the windows done and the sha256 of the rows of each snapshot (written after the memmaps are flushed),
    checked before a resume; at the end the store moves into place. One instance at a time (a lock)."""
    import time

    from .resume.items import mark_done
    from .resume.keys import job_key
    from .resume.work_folder import WorkLock, remove_work, work_dir

    out_dir = Path(out_dir)
    work = work_dir(out_dir)
    lock = WorkLock.hold(work, out_dir.name)
    tmp, marker = work / out_dir.name, work / f"{out_dir.name}.progress.json"
    key = job_key("activations", inputs, settings)
    T = settings["window_tokens"]
    start, segments = _kept_windows(tmp, marker, key, names, shape, STORE_DTYPES[dtype], T)
    if start:
        held = {nm: np.load(tmp / f"{nm}.npy", mmap_mode="r+") for nm in names}
        log.info("activations: resuming after %d windows from %s", start, tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
        marker.unlink(missing_ok=True)
        tmp.mkdir(parents=True)
        held, segments = {}, {}
    last, recorded = [time.monotonic()], [start]

    def saved(done: int) -> None:  # the windows before `done` are written
        if time.monotonic() - last[0] < snapshot_s:
            return
        last[0] = time.monotonic()
        for mm in held.values():
            mm.flush()  # msync: on disk before the record that says so
        a, b = recorded[0] * T, done * T
        for nm in names:  # (rows a..b of each boundary: the windows since the last record)
            segments.setdefault(nm, []).append([a, b, _rows_sha256(tmp / f"{nm}.npy", a, b)])
        recorded[0] = done
        try:
            mark_done(marker, key, windows_done=done, segments=segments)
        except OSError as err:  # no record this time: the dump goes on (a resume starts from the last one)
            log.warning("activations: could not record the windows done (%s); going on without it", err)
            return
        log.info("activations: snapshot after %d windows", done)

    try:
        with _disk_full_is_clear(out_dir, needed):
            if not held:
                check_free_space(tmp, needed, out_dir)
                held.update({nm: _reserved_memmap(tmp / f"{nm}.npy", shape, STORE_DTYPES[dtype]) for nm in names})
            fill(tmp, held, start, saved)
    except LayergeomError:  # a bad input (or a full disk): nothing is left behind, nothing to resume
        held.clear()
        shutil.rmtree(tmp, ignore_errors=True)
        marker.unlink(missing_ok=True)
        remove_work(work, [], lock=lock)
        raise
    held.clear()  # the memmaps closed before the folder moves
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    marker.unlink(missing_ok=True)
    remove_stale_temporaries(marker)  # a record a killed try was writing
    remove_work(work, [], lock=lock)


#: largest squared norm of an activation row that float32 holds: beyond it norms, Gram matrices and kNN
#: distances in float32 overflow to inf
FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_activations(x: np.ndarray, name: str, start: int, T: int) -> None:
    """Stop on a non-finite activation, or one whose squared norm overflows float32, naming boundary and window."""
    if not np.isfinite(x).all():
        bad = start + int(np.argwhere(~np.isfinite(x))[0, 0]) // T
        raise LayergeomError(f"non-finite activations at boundary {name}, window {bad}")
    sq = np.einsum("ij,ij->i", x, x, dtype=np.float64)  # (rows,) squared norms, exactly representable range
    if sq.max(initial=0.0) > FLOAT32_MAX:
        row = int(sq.argmax())
        raise LayergeomError(
            f"activations overflow float32 at boundary {name}, window {start + row // T}: a state of norm "
            f"{np.sqrt(sq[row]):.3g} (its square exceeds {FLOAT32_MAX:.3g}); the model's weights hold huge values"
        )


def disk_full_message(where, needed: int, free: int | None = None) -> str:
    have = f", {free / 1e9:.3g} GB free" if free is not None else ""
    return (
        f"disk full at {where}: the activation store needs ~{needed / 1e9:.3g} GB{have}; free space or put "
        f"results/ on a larger disk (fewer corpus.n_windows make the store smaller)"
    )


def check_free_space(path: Path, needed: int, where=None) -> None:
    """Refuse to start a dump that cannot fit: a full disk under a memmap write kills the job with SIGBUS."""
    free = shutil.disk_usage(path).free
    if free < needed:
        raise LayergeomError(disk_full_message(where or path, needed, free))


def release_rows(mm: np.memmap, start: int, stop: int) -> None:
    """Unmap the pages of rows start..stop of a written memmap from this process (``madvise(MADV_DONTNEED)``).

    The data stays in the file and the page cache (a shared mapping's dirty pages are kept for writeback and read
    back on the next access), but the job's RSS no longer grows with the store: the dump holds one batch of each
    file, not the whole store (136 GB for an 8B model's 65 boundaries of 128k tokens in float32), which an RSS-based
    memory limit would count in full. A no-op where madvise is not available."""
    raw = getattr(mm, "_mmap", None)
    if raw is None or not hasattr(raw, "madvise") or not hasattr(mmap, "MADV_DONTNEED") or stop <= start:
        return
    row = mm.strides[0]
    lead = mm.offset % mmap.ALLOCATIONGRANULARITY  # where the array starts in the mapping
    a = (lead + start * row) // mmap.PAGESIZE * mmap.PAGESIZE
    b = min(len(raw), -(-(lead + stop * row) // mmap.PAGESIZE) * mmap.PAGESIZE)
    if b > a:
        raw.madvise(mmap.MADV_DONTNEED, a, b - a)


def _reserved_memmap(path: Path, shape: tuple[int, int], dtype=np.float32) -> np.memmap:
    """A .npy memmap whose disk blocks are allocated now, so that writes into it cannot hit a full disk
    (a sparse file would fail later, inside a memmap write, as SIGBUS); ENOSPC is raised here instead."""
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    if hasattr(os, "posix_fallocate"):
        with open(path, "r+b") as f:
            try:
                os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
            except OSError as err:
                if err.errno == errno.ENOSPC:
                    raise
                # EINVAL / EOPNOTSUPP: the file system cannot reserve blocks; the free-space check must do
    return mm


@contextlib.contextmanager
def _disk_full_is_clear(where, needed: int):
    """Turn ENOSPC inside the block into the one-line disk-full error (the atomic temporary is removed)."""
    try:
        yield
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        free = shutil.disk_usage(Path(where).parent).free
        raise LayergeomError(disk_full_message(where, needed, free)) from None
