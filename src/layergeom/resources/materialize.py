"""What ``materialize`` asks: its peak host memory, measured by ``bench/materialize_memory.py``
(``bench/results/materialize_memory.md``, docs/precision.md): about 1.2× the weights in the target dtype above a
baseline of torch and transformers, whatever the source dtype (files in the target dtype already are
memory-mapped, not copied). The job asks for 1.3× plus 2.5 GB, counted from the safetensors headers of the files
it reads (no tensor is loaded)."""

from __future__ import annotations

from collections.abc import Iterable

from .files import DTYPE_BYTES, checkpoint_elements, pickle_weight_bytes

#: materialize's peak host memory: this many times the weights in the target dtype, plus the baseline below
MATERIALIZE_FACTOR = 1.3
MATERIALIZE_BASE_MB = 2500
#: what a job asks when there are no safetensors to count (GGUF, trained and config models: small ones)
MATERIALIZE_MIN_MB = 4000


def materialize_mem_mb(n_params: int, dtype: str = "float32", extra_mb: float = 0.0) -> int:
    """Host memory (MB) for materialising `n_params` weights in `dtype`: 1.3× their size + 2.5 GB (+ `extra_mb`),
    at least 4 GB."""
    if n_params <= 0:
        return MATERIALIZE_MIN_MB
    mb = MATERIALIZE_FACTOR * n_params * DTYPE_BYTES[dtype] / 1e6 + MATERIALIZE_BASE_MB + extra_mb
    return int(max(MATERIALIZE_MIN_MB, -(-mb // 1)))


def materialize_request_mb(folders: Iterable, dtype: str = "float32") -> int:
    """What materialize asks for, from the weight files in `folders`: safetensors counted from their headers
    (mapped, not copied); ``pytorch_model*.bin`` files (old hub revisions) are read whole by torch.load before
    the conversion, so their bytes count on top, with at most bytes / 2 parameters (float16 files). Not
    measured for .bin files: a bound from how they are read."""
    folders = [d for d in folders if d]
    n = checkpoint_elements(folders)
    b = pickle_weight_bytes(folders)
    return materialize_mem_mb(n + b // 2, dtype, extra_mb=b / 1e6)
