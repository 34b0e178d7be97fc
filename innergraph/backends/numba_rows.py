"""A Numba Scan's array rows written by a loop, not by Numba's slice assignment.

Terms
-----
row store
    A statement of PyTensor's generated Numba Scan that writes a step's output into its
    storage: ``<name>_storage[<index>] = inner_out_<k>``. With an array output (a vector
    state, a per-step row) Numba compiles it as a slice assignment, whose shape check
    formats its error message with f-strings (``raise_with_shape_context``): Numba then
    compiles its string machinery (integer formatting, joins, concatenation) the first
    time a process needs it, and links it into every function that stores a row. A fresh
    process pays about 5 s for the first such statement where the same store written as a
    loop costs about 1 s (measured 2026-11-30, Numba 0.68; `design/benchmarks.md`).
`store_row`
    The same store as one Numba function: a 0-d value, or one of another number of
    dimensions than its row, is assigned as before; an array value is checked against its
    row's shape (an error with a fixed message) and copied element by element (vectors and
    matrices by plain loops, more dimensions through ``np.ndindex``), through a copy of it
    where its bytes' extent overlaps the row's, the test Numba's slice assignment makes. A
    value's axis of length 1 is broadcast along its row's, as the slice assignment (and
    NumPy, in PyTensor's other linkers) does: a step may return a row of length 1 for a
    state of length 3. One compiled function per signature: a 2-d row of two signatures
    costs 7 compilations where the slice assignment costs 45.

`scan_rows_by_loop` is the context in which PyTensor's Numba Scan conversion compiles
its generated source with its row stores replaced by `store_row` calls
(`rows_by_loop`); `rows_key` is the cache key of a loop converted so.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from hashlib import sha256
from typing import Any

import numpy as np
from numba import types
from numba.extending import overload
from pytensor.link.numba.dispatch import scan as numba_scan

__all__ = ["ROWS_VERSION", "rows_by_loop", "rows_key", "scan_rows_by_loop", "store_row"]

#: The version of the code `rows_by_loop` writes, part of `rows_key`: raised when it changes.
#: 2: a value's axis of length 1 is broadcast along its row's (version 1 raised).
#: 3: the same stores without Numba's ``min``, ``max`` and ``int`` (a cheaper compile).
ROWS_VERSION = 3

#: A row store of PyTensor's generated Scan source (module docstring); the index holds no brackets.
_ROW_STORE = re.compile(r"^(?P<indent>[ ]+)(?P<storage>\w+_storage)\[(?P<index>[^\[\]\n]+)\] = (?P<value>inner_out_\d+)$", re.MULTILINE)


def store_row(storage: Any, index: Any, value: Any) -> None:
    """``storage[index] = value``: Numba's code is `_store_row`'s; this is its meaning in Python."""
    storage[index] = value


_MISMATCH = "Scan: a step's output does not have the shape of its output's storage row"


@overload(store_row)
def _store_row(storage: Any, index: Any, value: Any) -> Callable[..., None]:
    # One function per signature, its helpers' code written out: each jitted helper would be
    # one more function for Numba to compile in every process (module docstring).
    row_ndim = storage.ndim - 1 if isinstance(storage, types.Array) and isinstance(index, types.Integer) else -1
    if not isinstance(value, types.Array) or value.ndim == 0 or value.ndim != row_ndim:

        def assign(storage: Any, index: Any, value: Any) -> None:
            storage[index] = value

        return assign

    # the bytes each occupies, first to one past the last: overlapping, the value is read whole first;
    # one and two dimensions as plain loops (a state, a covariance per step), more through np.ndindex;
    # an axis of the value of length 1 is read at 0 along its row's (broadcast: `along` is 0 there).
    # Written without `min`, `max` and `int`: each is an overload Numba compiles and links into
    # this function and every loop that calls it (a loop storing 1-d and 2-d rows compiled in
    # 1.45-1.59 s with them, 1.42-1.45 s without).
    def copy(storage: Any, index: Any, value: Any) -> None:
        row = storage[index]
        for d in range(ndim):
            if value.shape[d] != row.shape[d] and value.shape[d] != 1:
                raise ValueError(_MISMATCH)
        if row.size == 0:
            return
        low = high = row.ctypes.data
        value_low = value_high = value.ctypes.data
        for d in range(ndim):
            step = (row.shape[d] - 1) * row.strides[d]
            if step < 0:
                low += step
            else:
                high += step
            step = (value.shape[d] - 1) * value.strides[d]
            if step < 0:
                value_low += step
            else:
                value_high += step
        source = value
        if value_low < high + row.itemsize and low < value_high + value.itemsize:
            source = value.copy()
        if ndim == 1:
            along = 0 if source.shape[0] == 1 else 1
            for j in range(row.shape[0]):
                row[j] = source[j * along]
        elif ndim == 2:
            along = 0 if source.shape[0] == 1 else 1
            along_k = 0 if source.shape[1] == 1 else 1
            for j in range(row.shape[0]):
                for k in range(row.shape[1]):
                    row[j, k] = source[j * along, k * along_k]
        else:
            wide = np.broadcast_to(source, row.shape)
            for at in np.ndindex(row.shape):
                row[at] = wide[at]

    ndim = value.ndim  # a constant of the typed function: the other branches are pruned
    return copy


def rows_by_loop(src: str) -> str:
    """PyTensor's generated Scan source ``src`` with each row store (module docstring) a `store_row` call."""
    return _ROW_STORE.sub(r"\g<indent>store_row(\g<storage>, \g<index>, \g<value>)", src)


def rows_key(key: str) -> str:
    """The cache key of a loop converted under `scan_rows_by_loop`, from PyTensor's key of it."""
    return sha256(f"{key}|innergraph rows by loop {ROWS_VERSION}".encode()).hexdigest()


#: Held while PyTensor's name is swapped (`scan_rows_by_loop`): by one thread at a time, re-entered by a nested loop's conversion.
_SWAPPED = threading.RLock()


@contextmanager
def scan_rows_by_loop() -> Iterator[None]:
    """PyTensor's Numba Scan conversion, within this context, compiles its source with `rows_by_loop`.

    PyTensor's ``numba_funcify_Scan`` compiles the source it generates with the name
    ``compile_numba_function_src`` of its module; within the context that name compiles
    the source with its row stores rewritten, `store_row` in its globals. The name is
    restored on leaving, and the conversion's key must then be `rows_key` of PyTensor's.
    One thread at a time: interleaved swaps of two threads could leave the rewrite in place
    for vanilla's conversions (under PyTensor's keys) after innergraph is uninstalled.
    """
    with _SWAPPED:
        compile_src = numba_scan.compile_numba_function_src

        def compile_rows_by_loop(
            src: str,
            function_name: str,
            global_env: dict[Any, Any] | None = None,
            local_env: dict[Any, Any] | None = None,
            write_to_disk: bool = False,
            cache_key: str | None = None,
        ) -> Callable[..., Any]:
            env = {**(global_env or {}), "store_row": store_row}
            return compile_src(rows_by_loop(src), function_name, env, local_env, write_to_disk, cache_key)

        numba_scan.compile_numba_function_src = compile_rows_by_loop
        try:
            yield
        finally:
            numba_scan.compile_numba_function_src = compile_src
