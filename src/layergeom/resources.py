"""What a job asks of the machine, estimated before it runs (torch-free: the workflow reads it when it
schedules jobs).

``materialize`` converts a checkpoint into safetensors in the model's dtype. Its peak host memory was measured
by ``bench/materialize_memory.py`` (``bench/results/materialize_memory.md``, docs/precision.md): about 1.2× the
weights in the target dtype above a baseline of torch and transformers, whatever the source dtype (files in
the target dtype already are memory-mapped, not copied). The job asks for 1.3× plus 2.5 GB, counted from the
safetensors headers of the files it reads (no tensor is loaded).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path

#: bytes per element of each safetensors dtype code and of each models.<m>.dtype
DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
    "F8_E4M3": 1, "F8_E5M2": 1, "float32": 4, "bfloat16": 2, "float16": 2,
}  # fmt: skip
#: materialize's peak host memory: this many times the weights in the target dtype, plus the baseline below
MATERIALIZE_FACTOR = 1.3
MATERIALIZE_BASE_MB = 2500
#: what a job asks when there are no safetensors to count (GGUF, trained and config models: small ones)
MATERIALIZE_MIN_MB = 4000


def safetensors_elements(path) -> int:
    """The number of tensor elements in a safetensors file, from its JSON header (8-byte length, then JSON)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    total = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for s in t["shape"]:
            count *= int(s)
        total += count
    return total


def checkpoint_elements(folders: Iterable) -> int:
    """Tensor elements of every ``*.safetensors`` file in the given folders (missing folders count 0)."""
    return sum(
        safetensors_elements(p) for d in folders if Path(d).is_dir() for p in sorted(Path(d).glob("*.safetensors"))
    )


def pickle_weight_bytes(folders: Iterable) -> int:
    """Bytes of the ``pytorch_model*.bin`` weights in the given folders (hub revisions without safetensors)."""
    return sum(p.stat().st_size for d in folders if Path(d).is_dir() for p in Path(d).glob("pytorch_model*.bin"))


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
