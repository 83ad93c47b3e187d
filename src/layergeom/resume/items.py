"""Finished items (the Jacobian and graph jobs, whose boundaries have their own files): each item's files are
written into the work folder as it finishes, a marker with the key and each file's size and sha256 last; a restart
skips the items whose marker matches and whose files still have the recorded size and sha256 (:func:`item_done`,
:func:`mark_done`): a truncated file, or one swapped with another item's, is redone."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..runtime import atomic_path

log = logging.getLogger("layergeom")


def file_record(path) -> dict:
    """A kept file's record: {"size": bytes, "sha256": hex digest of its content}."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 24), b""):
            h.update(chunk)
    return {"size": Path(path).stat().st_size, "sha256": h.hexdigest()}


def record_problem(path: Path, record: dict) -> str | None:
    """Why a kept file does not match its record ({"size", "sha256"}), or None when it does."""
    path = Path(path)
    if not path.is_file():
        return f"{path.name} is missing"
    size = path.stat().st_size
    if size != record.get("size"):
        return f"{path.name} has {size} bytes, its marker recorded {record.get('size')}"
    if file_record(path)["sha256"] != record.get("sha256"):
        return f"{path.name} is not the file its marker recorded (another sha256)"
    return None


def npy_problem(path, shape: tuple, dtype) -> str | None:
    """Why a kept ``.npy`` file is not one of this shape and dtype, whole (its size: header + data), or None."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            got_shape, fortran, got_dtype = read(fh)
            offset = fh.tell()
    except FileNotFoundError:
        return f"{path.name} is missing"
    except (OSError, ValueError) as err:
        return f"{path.name} has no readable .npy header ({err})"
    if tuple(got_shape) != tuple(shape) or np.dtype(got_dtype) != np.dtype(dtype) or fortran:
        return f"{path.name} holds {got_dtype} {tuple(got_shape)}, not {np.dtype(dtype)} {tuple(shape)}"
    size, want = path.stat().st_size, offset + int(np.prod(shape)) * np.dtype(dtype).itemsize
    if size != want:
        return f"{path.name} has {size} bytes, not the {want} of its header"
    return None


def item_done(marker: Path, key: str, files: Iterable[str] | None = None) -> bool:
    """Whether an item's marker holds this key and, for each name in ``files`` (in the marker's folder), a
    record that the file still matches (size and sha256). A mismatch is logged (one line): the item is redone."""
    marker = Path(marker)
    try:
        meta = json.loads(marker.read_text())
        if meta.get("key") != key:
            return False
    except (OSError, ValueError, AttributeError):
        return False
    records = meta.get("files", {})
    for name in files or ():
        problem = record_problem(marker.parent / name, records[name]) if name in records else (
            f"{name} is not recorded in the marker")  # fmt: skip
        if problem:
            log.warning("%s: %s in %s; redoing it", marker.name.split(".done")[0], problem, marker.parent)
            return False
    return True


def mark_done(marker: Path, key: str, files: Iterable[str] = (), **extra) -> None:
    """Write an item's marker (last, after its files): its key, the size and sha256 of each of ``files`` (names
    in the marker's folder) and any JSON-writable extras."""
    marker = Path(marker)
    records = {n: file_record(marker.parent / n) for n in files}
    with atomic_path(marker) as tmp:
        tmp.write_text(json.dumps({**extra, "files": records, "key": key}, indent=2) + "\n")
