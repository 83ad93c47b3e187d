"""Activation store: the residual stream at every boundary for all windows, one .npy memmap per boundary.

Layout of ``results/{model}/{checkpoint}/activations/``:

- ``{boundary}.npy`` (n_tokens, d) float32, rows in (window, position) order, for every boundary and ``final``;
- ``index.npy`` (n_tokens, 3) int64 columns ``window, position, token_id``;
- ``store.json``: names, shape, dtype, model and checkpoint.

Rows with position 0 (BOS / attention sink) are kept in the files and excluded by ``nonbos``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .names import FINAL, KIND_ORDER
from .runtime import LayergeomError, atomic_path, progress

log = logging.getLogger("layergeom")


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
        return [n for n in self.names if n != FINAL]

    @property
    def d_model(self) -> int:
        return int(self.meta["d_model"])

    @property
    def n_windows(self) -> int:
        return int(self.meta["n_windows"])

    @property
    def window_tokens(self) -> int:
        return int(self.meta["window_tokens"])

    def states(self, name: str) -> np.ndarray:
        """(n_tokens, d) memmap of one boundary (or ``final``)."""
        return np.load(self.path / f"{name}.npy", mmap_mode="r")

    def block_inputs(self) -> list[str]:
        """Names of h_0 .. h_{L-1} (block inputs) followed by ``final`` = h_L: the Paper A transitions."""
        firsts = [n for n in self.boundaries if KIND_ORDER[n.split(".")[1]] == 0]
        return firsts + [FINAL]

    @property
    def nonbos(self) -> np.ndarray:
        """Boolean mask of rows that are not position 0."""
        return self.index[:, 1] > 0

    def token_ids(self) -> np.ndarray:
        """(n_windows, window_tokens) token ids."""
        return self.index[:, 2].reshape(self.n_windows, self.window_tokens)


def dump_activations(
    adapter,
    windows: np.ndarray,
    out_dir: str | Path,
    *,
    batch_size: int = 8,
    extra_meta: dict | None = None,
) -> ActivationStore:
    """Stream the residual stream at every boundary of all windows (n, T) into per-boundary memmaps.

    Memory stays bounded by one batch of activations whatever the corpus size; a NaN or inf in any
    activation stops the dump with the boundary and window named, and leaves no output behind.
    """
    import torch

    n, T = windows.shape
    names = [b.name for b in adapter.boundaries] + [FINAL]
    d = adapter.d_model
    needed = len(names) * n * T * d * np.dtype(np.float32).itemsize + n * T * 3 * 8  # boundaries + index
    with atomic_path(out_dir, is_dir=True) as tmp, _disk_full_is_clear(out_dir, needed):
        check_free_space(tmp, needed, out_dir)
        mms = {nm: _reserved_memmap(tmp / f"{nm}.npy", (n * T, d)) for nm in names}
        for start in progress(range(0, n, batch_size), desc="activations", unit="batch"):
            ids = torch.as_tensor(windows[start : start + batch_size], dtype=torch.long)
            cap = adapter.capture(ids)
            missing = set(names) - set(cap)
            if missing:
                raise RuntimeError(f"adapter did not capture {sorted(missing)}")
            rows = slice(start * T, (start + ids.shape[0]) * T)
            for nm in names:
                x = cap[nm].float().cpu().numpy().reshape(-1, d)
                check_activations(x, nm, start, T)
                mms[nm][rows] = x
        for mm in mms.values():
            mm.flush()
        del mms
        win, pos = np.divmod(np.arange(n * T), T)
        np.save(tmp / "index.npy", np.stack([win, pos, windows.reshape(-1)], axis=1).astype(np.int64))
        meta = {"names": names, "n_windows": n, "window_tokens": T, "d_model": d, "dtype": "float32"}
        meta.update(extra_meta or {})
        (tmp / "store.json").write_text(json.dumps(meta, indent=2) + "\n")
    log.info("dumped %d windows x %d tokens at %d boundaries to %s", n, T, len(names), out_dir)
    return ActivationStore(Path(out_dir))


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


def _reserved_memmap(path: Path, shape: tuple[int, int]) -> np.memmap:
    """A float32 .npy memmap whose disk blocks are allocated now, so that writes into it cannot hit a full disk
    (a sparse file would fail later, inside a memmap write, as SIGBUS); ENOSPC is raised here instead."""
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
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
