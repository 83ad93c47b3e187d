"""State trees <-> (JSON, arrays): what a snapshot or a fanned-out job's part holds, stored without pickle and
restored bit for bit."""

from __future__ import annotations

import numpy as np


def pack(tree) -> tuple[object, dict[str, np.ndarray]]:
    """A tree of dicts, lists, tuples, None, bools, ints, floats (nan, inf), complex numbers, strings, numpy
    scalars and arrays and pandas DataFrames as (a JSON-writable tree, named arrays). Numpy float64, int64,
    bool and complex128 scalars come back as the Python values they equal, other numpy scalars with their
    dtype, arrays with their dtype; frames column by column (text columns: strings only, else TypeError)."""
    arrays: dict[str, np.ndarray] = {}

    def put(a: np.ndarray) -> dict:
        if a.dtype == object:  # a frame's text column: strings only (None, nan or numbers would come back as text)
            if not all(isinstance(v, str) for v in a.ravel()):
                raise TypeError("cannot snapshot an object array of anything but strings")
            a = a.astype(str)
        name = f"a{len(arrays)}"
        arrays[name] = a
        return {"__array__": name}

    def go(x):
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, np.ndarray):
            return put(x)
        if isinstance(x, np.generic):
            if x.dtype not in (np.float64, np.int64, np.bool_, np.complex128, np.str_):  # exact as Python values
                return {"__scalar__": [x.dtype.str, go(x.item())]}  # float32 etc.: their own type back
            x = x.item()
        if isinstance(x, complex):
            return {"__complex__": [x.real, x.imag]}
        if isinstance(x, (int, float)):
            return x
        if isinstance(x, dict):
            if not all(isinstance(k, str) for k in x):
                return {"__items__": [[go(k), go(v)] for k, v in x.items()]}
            return {"__dict__": {k: go(v) for k, v in x.items()}}
        if isinstance(x, tuple):
            return {"__tuple__": [go(v) for v in x]}
        if isinstance(x, list):
            return [go(v) for v in x]
        if type(x).__name__ == "DataFrame":
            return {"__frame__": [[str(c), put(x[c].to_numpy()), str(x[c].dtype)] for c in x.columns]}
        raise TypeError(f"cannot snapshot a {type(x).__name__}")

    return go(tree), arrays


def unpack(tree, arrays: dict[str, np.ndarray]):
    """The inverse of :func:`pack`."""

    def go(x):
        if isinstance(x, list):
            return [go(v) for v in x]
        if not isinstance(x, dict):
            return x
        if "__array__" in x:
            return arrays[x["__array__"]]
        if "__complex__" in x:
            return complex(*x["__complex__"])
        if "__scalar__" in x:
            dtype, value = x["__scalar__"]
            return np.dtype(dtype).type(go(value))
        if "__dict__" in x:
            return {k: go(v) for k, v in x["__dict__"].items()}
        if "__items__" in x:
            return {go(k): go(v) for k, v in x["__items__"]}
        if "__tuple__" in x:
            return tuple(go(v) for v in x["__tuple__"])
        if "__frame__" in x:
            import pandas as pd

            cols = {}
            for name, ref, dtype in x["__frame__"]:
                a = arrays[ref["__array__"]]
                cols[name] = a.astype(object) if dtype == "object" else a
            return pd.DataFrame(cols)
        raise ValueError(f"unknown snapshot node {sorted(x)}")

    return go(tree)
