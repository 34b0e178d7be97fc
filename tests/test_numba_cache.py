"""The entries innergraph adds to Numba's disk cache: nothing lost, nothing stale, nothing of vanilla's touched.

Each test runs fresh processes (`_child`) on one compile directory, as users' processes
share ``base_compiledir``: a process compiles a function, and what the next one compiles
or loads is counted with Numba's compile events. innergraph's entries are the converted
functions it caches itself (`innergraph.backends.numba_once`) and the final functions
of `innergraph.backends.numba_link`.
"""

import importlib.util
import io
import os
import pickle
import subprocess
import sys
import textwrap
from hashlib import sha256
from pathlib import Path

import numpy as np
import pytensor
import pytest
from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

from children import result, spawn

import innergraph
from innergraph.backends.numba_link import final_function
from innergraph.backends.numba_once import DIRECT, FORMAT, direct_key

_CHILD = textwrap.dedent(
    """
    import json, sys, warnings
    variant, graph, number = sys.argv[1], sys.argv[2], float(sys.argv[3])
    if variant == "innergraph":
        import innergraph
    if len(sys.argv) > 4 and sys.argv[4].startswith("format:"):  # as if another innergraph wrote or reads it
        import innergraph.backends.numba_once
        innergraph.backends.numba_once.FORMAT = int(sys.argv[4].removeprefix("format:"))
    elif len(sys.argv) > 4:
        import pytensor
        pytensor.__version__ = sys.argv[4]  # as if another PyTensor wrote or reads the cache
    import numpy as np, pytensor, pytensor.tensor as pt
    from numba.core import event

    compiled = []

    class Count(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            compiled.append(1)

    event.register("numba:compile", Count())
    x = pt.dvector("x")
    if graph == "density":
        y = pt.exp(-0.5 * (x / number) ** 2).sum() + pt.log(x.sum() + 3.7)
    elif graph == "casts":  # scalar Ops of narrow dtypes: PyTensor wraps each in a generated cast_scalar_outputs
        import pytensor.scalar as ps
        a, b = ps.float32("a"), ps.int8("b")
        f = pytensor.function([a, b], [a * b + np.float32(1), b * b, a - np.float32(number)], mode="NUMBA")
        fn = lambda x: sum(float(v) for v in f(np.float32(x[1]), np.int8(x[2])))
    else:  # a loop whose step is `plus` or `minus`, with `number` in its body
        step = (lambda v, c: c * number + v) if graph == "plus" else (lambda v, c: c * number - v)
        ys = pytensor.scan(step, sequences=[x], outputs_info=[pt.as_tensor_variable(np.float64(0.0))], return_updates=False)
        y = ys[-1]
    if graph != "casts":
        fn = pytensor.function([x], y, mode="NUMBA")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = float(fn(np.arange(1.0, 5.0)))
    print(json.dumps({"value": value, "compiled": len(compiled),
                      "warnings": [str(w.message) for w in caught if "innergraph" in str(w.message)]}))
    """
)


def _child(compiledir, variant, graph="density", number=1.5, version=None, wait=True):
    return spawn(_CHILD, compiledir, variant, graph, str(number), *([version] if version else []), wait=wait)


def _expected(graph, number):
    x = np.arange(1.0, 5.0)
    if graph == "density":
        return np.exp(-0.5 * (x / number) ** 2).sum() + np.log(x.sum() + 3.7)
    if graph == "casts":
        return (2.0 * 3.0 + 1.0) + 3 * 3 + (2.0 - number)
    c = 0.0
    for v in x:
        c = c * number + v if graph == "plus" else c * number - v
    return c


def _files(compiledir):
    folder = Path(compiledir) / "numba"
    return {p.name: sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.suffix in (".nbi", ".nbc")}


def _ours(compiledir):
    return [name for name in _files(compiledir) if "_innergraph_" in name]


def _environment_modules(compiledir):
    """The module names innergraph's entries give their Numba environments (``_rebuild_env``'s first argument)."""
    found = set()

    class Reader(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) == ("numba.core.environment", "_rebuild_env"):
                return lambda modname, consts, env_name: found.add(modname)
            return super().find_class(module, name)

    folder = Path(compiledir) / "numba"
    for name in _ours(compiledir):
        if name.endswith(".nbc"):
            Reader(io.BytesIO((folder / name).read_bytes())).load()
    return found


def _assert_environments_importable(compiledir):
    """Every environment in innergraph's entries names a module the next process can import (numba-linking.md)."""
    modules = _environment_modules(compiledir)
    assert modules, "no environment read: the check would pass vacuously"
    assert all(isinstance(m, str) and importlib.util.find_spec(m) is not None for m in modules), modules


def test_each_converted_function_is_cached_itself():
    import numpy as np
    import pytensor
    import pytensor.tensor as pt

    x = pt.dvector("x")
    fn = pytensor.function([x], pt.exp(-0.5 * (x / 1.5) ** 2).sum() + pt.log(x.sum() + 3.7), mode="NUMBA")
    fn(np.arange(1.0, 4.0))
    final = final_function(fn.vm.jit_fn)
    called = [v for v in final.py_func.__globals__.values() if hasattr(v, "py_func") and v is not final]
    keys = [CACHED_SRC_FUNCTIONS.get(dispatcher.py_func, "") for dispatcher in called]
    assert keys and all("_innergraph_" in key for key in keys), keys  # no entry under vanilla's name
    # the converted functions that are jitted Python functions are cached themselves, not through
    # PyTensor's (*args) wrapper (FusedElemwise converts to a plain function, which needs it)
    direct = [d for d, key in zip(called, keys, strict=True) if DIRECT in key]
    assert len(direct) >= 2
    for dispatcher in direct:
        source = getattr(dispatcher.py_func, "__source__", None) or ""
        assert not source.startswith(f"def {dispatcher.py_func.__name__}(*args)")


def test_a_changed_body_never_hits_a_stale_entry(tmp_path):
    for graph, number in [("plus", 0.9), ("minus", 0.9), ("plus", 0.8)]:  # an Op of the body, then a number of it
        got = _child(tmp_path, "innergraph", graph, number)
        assert got["value"] == pytest.approx(_expected(graph, number), rel=1e-14), (graph, number)
    assert _child(tmp_path, "innergraph", "minus", 0.9)["compiled"] == 0  # and each was kept
    _assert_environments_importable(tmp_path)


def test_the_docs_new_ops_are_loaded_by_the_next_process(tmp_path):
    """The Ops design/testing.md's blocks define run from the cache in the next process.

    Their generated functions had globals without ``__name__``; Numba pickled their
    environment under the module name None and every later process failed to load them
    (``'NoneType' object has no attribute 'startswith'``), warned and compiled again
    (design/numba-linking.md, "An environment Numba can load").
    """
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={tmp_path}"}
    test = f"{Path(__file__).parent / 'test_docs.py'}::test_every_code_block_runs[testing.md]"
    runs = [
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "always", test],
                       env=env, capture_output=True, text=True, timeout=900)
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stdout[-3000:]
    assert "could not be read" not in runs[1].stdout + runs[1].stderr, runs[1].stdout[-3000:]
    _assert_environments_importable(tmp_path)


def test_a_generated_scalar_cast_is_loaded_by_a_process_with_another_final_function(tmp_path):
    """PyTensor's ``cast_scalar_outputs`` (generated, globals without ``__name__``) loads in the next process.

    The second process compiles another final function, so it loads the converted
    functions' entries themselves; with the globals passed as PyTensor built them each
    load failed (``'NoneType' object has no attribute 'startswith'``), warned and
    compiled again: pymc-extras' Kalman filter test failed CI on the warning.
    """
    first = _child(tmp_path, "innergraph", "casts", 1.0)
    second = _child(tmp_path, "innergraph", "casts", 0.5)
    assert second["warnings"] == [], second["warnings"]
    assert (first["value"], second["value"]) == (_expected("casts", 1.0), _expected("casts", 0.5))
    assert second["compiled"] < first["compiled"], (first, second)  # the cast functions were loaded, not compiled
    _assert_environments_importable(tmp_path)


def test_two_processes_compiling_at_once_both_succeed_and_leave_one_valid_entry(tmp_path):
    first, second = (_child(tmp_path, "innergraph", wait=False) for _ in range(2))
    for process in (first, second):
        assert result(process)["value"] == pytest.approx(_expected("density", 1.5), rel=1e-14)
    again = _child(tmp_path, "innergraph")
    assert again["compiled"] == 0 and again["warnings"] == []
    assert len([n for n in _ours(tmp_path) if "numba_funcified_fgraph" in n and n.endswith(".nbi")]) == 1


@pytest.mark.parametrize("damage", ["truncated data", "garbage index"])
def test_an_unreadable_entry_is_removed_and_recompiled_with_one_warning(tmp_path, damage):
    _child(tmp_path, "innergraph")
    folder = Path(tmp_path) / "numba"
    suffix = ".nbc" if damage == "truncated data" else ".nbi"
    [entry] = [folder / n for n in _ours(tmp_path) if "numba_funcified_fgraph" in n and n.endswith(suffix)]
    entry.write_bytes(entry.read_bytes()[:100] if damage == "truncated data" else b"not an index\n")
    got = _child(tmp_path, "innergraph")
    assert got["value"] == pytest.approx(_expected("density", 1.5), rel=1e-14)
    assert len(got["warnings"]) == 1 and "could not be read" in got["warnings"][0]
    again = _child(tmp_path, "innergraph")
    assert again["compiled"] == 0 and again["warnings"] == []


def test_every_damaged_entry_is_removed_and_recompiled_with_one_warning_each(tmp_path):
    # every entry innergraph wrote, PyTensor's wrapper of a fused loop (`WRAPPED`) among them: a
    # damaged wrapper entry once crashed the compilation (found by damaging every file at once)
    _child(tmp_path, "innergraph")
    folder = Path(tmp_path) / "numba"
    indexes = sorted(n for n in _ours(tmp_path) if n.endswith(".nbi"))
    assert any("_innergraph_wrapped_" in n for n in indexes) and any("_innergraph_direct_" in n for n in indexes)
    for i, index in enumerate(indexes):  # half the functions lose their index, half their data
        stem = index.removesuffix(".nbi")
        for path in [folder / index] if i % 2 else sorted(folder.glob(f"{stem}.*.nbc")):
            path.write_bytes(b"\x11damaged" + path.read_bytes()[8:])
    got = _child(tmp_path, "innergraph")
    assert got["value"] == pytest.approx(_expected("density", 1.5), rel=1e-14)
    assert len(got["warnings"]) == len(indexes) and all("could not be read" in w for w in got["warnings"])
    again = _child(tmp_path, "innergraph")
    assert again["compiled"] == 0 and again["warnings"] == []


def test_an_index_damaged_before_a_save_is_written_anew_with_one_warning(monkeypatch):
    import numba

    from innergraph.backends.numba_once import GuardedCache, cached_itself

    def halve(v):
        return v * 0.5

    key = f"test_save_guard_{os.getpid()}_{id(halve)}"
    first = cached_itself(numba.njit(halve), key)
    assert first(3.0) == 1.5  # compiled and saved: float64
    index = Path(first._cache._cache_path) / first._cache._cache_file._index_name
    assert index.exists()
    # damaged after this process read the index and before it saves the int64 compilation
    load = GuardedCache.load_overload

    def load_then_damage(self, sig, target_context):
        found = load(self, sig, target_context)
        index.write_bytes(b"\x11damaged")
        return found

    monkeypatch.setattr(GuardedCache, "load_overload", load_then_damage)
    with pytest.warns(RuntimeWarning, match="could not be written .* cached it anew") as caught:
        assert first(4) == 2.0
    assert len([w for w in caught if "innergraph" in str(w.message)]) == 1
    monkeypatch.undo()
    again = cached_itself(numba.njit(halve), key)
    again.compile((numba.int64,))
    assert again._cache_hits[(numba.int64,)] == 1  # loaded from the index written anew
    again.compile((numba.float64,))
    assert again._cache_misses[(numba.float64,)] == 1  # the damaged index took the float64 entry with it


def test_an_entry_of_another_pytensor_numba_or_format_is_not_used(tmp_path):
    _child(tmp_path, "innergraph")
    other = _child(tmp_path, "innergraph", version="3.3.0+other")
    assert other["compiled"] > 0 and other["value"] == pytest.approx(_expected("density", 1.5), rel=1e-14)
    older = _child(tmp_path, "innergraph", version="format:1")  # an innergraph whose entries other processes could not load
    assert older["compiled"] > 0 and older["warnings"] == []
    # another Numba: Numba's index records its version and refuses another's
    folder = Path(tmp_path) / "numba"
    [index] = [folder / n for n in _ours(tmp_path) if "numba_funcified_fgraph" in n and "3.3.0+other" not in n
               and "_format1_" not in n and n.endswith(".nbi")]
    with index.open("rb") as f:
        pickle.load(f)
        rest = f.read()
    index.write_bytes(pickle.dumps("0.1.0") + rest)
    again = _child(tmp_path, "innergraph")
    assert again["compiled"] == 1 and again["warnings"] == []  # the final function, compiled anew


def test_entries_name_the_package_innergraph_is_imported_under():
    """The key of every entry innergraph writes names ``innergraph`` or, in a PyTensor that ships it, ``pytensor.innergraph``.

    The code innergraph caches names its modules (a body's address, an exception class); Numba
    loads an entry's globals by module name. Found 2026-11-30: a patched PyTensor served the
    entries the monkey-patched form had written to the same compile directory (CI's environments
    share it), and their code imported a second copy of innergraph by its top-level name.
    ``tests/test_pickle.py``'s PyTensor-only function then loads the whole library.
    """
    assert f"_format{FORMAT}_{innergraph.__name__}_pytensor{pytensor.__version__}_" in direct_key("some_key")


@pytest.mark.monkey_patch_only  # in a patched PyTensor a process that never imports innergraph runs innergraph's code
def test_innergraph_leaves_vanillas_cache_as_it_was(tmp_path):
    first = _child(tmp_path, "vanilla")
    vanillas = _files(tmp_path)
    assert first["compiled"] > 0 and not _ours(tmp_path)
    _child(tmp_path, "innergraph")
    after = _files(tmp_path)
    assert {name: after[name] for name in vanillas} == vanillas  # not one of vanilla's files changed
    assert all("_innergraph_" in name for name in set(after) - set(vanillas))
    again = _child(tmp_path, "vanilla")
    assert again["compiled"] == 0 and again["value"] == first["value"]


def test_caching_turned_off_writes_no_entry(tmp_path):
    import pytensor
    import pytensor.tensor as pt

    with pytensor.config.change_flags(numba__cache=False):
        x = pt.dvector("x")
        ys = pytensor.scan(lambda v, c: 0.5 * c + v, sequences=[x], outputs_info=[pt.zeros(())], return_updates=False)
        fn = pytensor.function([x], ys[-1] * 1.5, mode="NUMBA")
        assert fn(np.arange(1.0, 4.0)) == pytest.approx(1.5 * (0.25 + 1.0 + 3.0))
    final = final_function(fn.vm.jit_fn)
    assert CACHED_SRC_FUNCTIONS.get(final.py_func) is None
    assert type(final._cache).__name__ == "NullCache"


_MOCKED_CHILD = textwrap.dedent(
    """
    # PyTensor's own tests run a function's Numba code in Python first (tests/link/numba/
    # test_basic.py, eval_python_only): numba_njit and numba.njit are no-ops and Numba's dtype
    # conversion is the identity while the function is compiled and called. Nothing may be
    # compiled for real (and cached) then: the entry would be served to the real compilation.
    import sys
    from unittest import mock
    if sys.argv[1] == "innergraph":
        import innergraph
    import numba, numpy as np, pytensor, pytensor.tensor as pt

    def noop(*args, **kwargs):
        def mark(f):
            f.py_func = f
            return f
        return mark(args[0]) if len(args) == 1 and callable(args[0]) else mark

    x = pt.dvector("x")
    ys = pytensor.scan(lambda v, c: c * 1.5 + v, sequences=[x], outputs_info=[pt.as_tensor_variable(np.float64(0.0))],
                       return_updates=False)
    values = np.arange(1.0, 5.0)
    if sys.argv[2] == "mocked-first":
        with mock.patch("numba.njit", noop), \\
                mock.patch("pytensor.link.numba.dispatch.basic.numba_njit", noop), \\
                mock.patch("pytensor.link.numba.dispatch.basic.numba.np.numpy_support.from_dtype", lambda d: d):
            in_python = pytensor.function([x], ys[-1], mode="NUMBA")
            print("python", float(in_python(values)))
    print("numba", float(pytensor.function([x], ys[-1], mode="NUMBA")(values)))
    """
)


@pytest.mark.parametrize("variant", ["vanilla", "innergraph"])
def test_code_run_in_python_under_pytensors_mocks_is_never_compiled_or_cached(tmp_path, variant):
    # issue 46's final functions were once compiled by Numba itself under these mocks, cached,
    # and served to the next compilation: a segmentation fault in PyTensor's test_scan.py
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={tmp_path}"}
    expected = 0.0
    for value in np.arange(1.0, 5.0):  # the loop's step: the state times 1.5, plus the sequence's entry
        expected = expected * 1.5 + value
    for run in ("mocked-first", "mocked-first", "real-only"):  # the second and third read what the first cached
        process = subprocess.run([sys.executable, "-c", _MOCKED_CHILD, variant, run], env=env,
                                 capture_output=True, text=True, timeout=600)
        assert process.returncode == 0, process.stderr[-3000:]
        printed = dict(line.split() for line in process.stdout.strip().splitlines())
        assert float(printed["numba"]) == pytest.approx(expected, rel=1e-12)
        if run == "mocked-first":
            assert float(printed["python"]) == pytest.approx(expected, rel=1e-12)
