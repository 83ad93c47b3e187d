"""What a request reads of a job's inputs without loading them: tensor counts from safetensors headers, the
bytes of pickle weight files, a ``.npy`` header's shape, an activation store's store.json and a config's width.
No tensor is read and nothing heavy is imported (the workflow calls these when it builds the DAG)."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from pathlib import Path

#: bytes per element of each safetensors dtype code and of each models.<m>.dtype
DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
    "F8_E4M3": 1, "F8_E5M2": 1, "float32": 4, "bfloat16": 2, "float16": 2,
}  # fmt: skip


def _safetensors_tensors(path):
    """(element count, dtype) of each tensor in a safetensors file, from its JSON header (8-byte length, then
    JSON; no tensor is read)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    for name, t in header.items():
        if name != "__metadata__":
            yield math.prod(int(s) for s in t["shape"]), t["dtype"]


def safetensors_elements(path) -> int:
    """The number of tensor elements in a safetensors file."""
    return sum(count for count, _ in _safetensors_tensors(path))


def safetensors_bytes(path) -> int:
    """The bytes of the tensors in a safetensors file, from its JSON header (no tensor is read)."""
    return sum(count * DTYPE_BYTES[dtype] for count, dtype in _safetensors_tensors(path))


def checkpoint_elements(folders: Iterable) -> int:
    """Tensor elements of every ``*.safetensors`` file in the given folders (missing folders count 0)."""
    return sum(
        safetensors_elements(p) for d in folders if Path(d).is_dir() for p in sorted(Path(d).glob("*.safetensors"))
    )


def pickle_weight_bytes(folders: Iterable) -> int:
    """Bytes of the ``pytorch_model*.bin`` weights in the given folders (hub revisions without safetensors)."""
    return sum(p.stat().st_size for d in folders if Path(d).is_dir() for p in Path(d).glob("pytorch_model*.bin"))


def npy_shape(path) -> tuple[int, ...] | None:
    """The shape in a ``.npy`` file's header (no data read, no numpy import); None for a missing file."""
    try:
        with open(path, "rb") as f:
            if f.read(6) != b"\x93NUMPY":
                return None
            major = f.read(2)[0]
            n = struct.unpack("<H" if major == 1 else "<I", f.read(2 if major == 1 else 4))[0]
            import ast

            return tuple(int(s) for s in ast.literal_eval(f.read(n).decode("latin1"))["shape"])
    except (OSError, ValueError, SyntaxError, KeyError, IndexError):
        return None


def store_meta(store_dir) -> dict | None:
    """An activation store's store.json (d_model, n_windows, window_tokens), or None when it is not there yet."""
    try:
        return json.loads((Path(store_dir) / "store.json").read_text())
    except (OSError, ValueError, TypeError):
        return None


def config_width(cfg: dict | None) -> int | None:
    """d_model of a config.json dict (its text config for a multimodal wrapper), or None."""
    from ..modelinfo import _WIDTH_KEYS, _first

    return _first(cfg, _WIDTH_KEYS) if cfg else None
