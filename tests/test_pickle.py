"""Pickled functions load without innergraph, and loading never installs it.

Functions are compiled and pickled here (innergraph installed); one fresh
interpreter that never imports innergraph loads and calls them, and reports what
it sees (module-scoped: one subprocess for the whole file).
"""

import copyreg
import json
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_default_mode
from pytensor.graph.fg import FunctionGraph
from pytensor.scan.op import Scan as NativeScan

import innergraph
from innergraph.ops.call import Call
from innergraph.ops.ifelse import IfElse
from innergraph.ops.loop import WhileLoop
from innergraph.ops.scan import Scan
from innergraph.patching import rewritten_store
from innergraph.patching.pickles import forget_innergraph
from typed import call, ifelse
from vanilla import vanilla_values

x, a = pt.dvector("x"), pt.dscalar("a")
X, A = np.linspace(-1.0, 2.0, 6), 1.5


def pytensor_only():
    """A Scan innergraph lifts and lowers, and an elemwise graph: PyTensor's Ops only once compiled."""
    ys = pytensor.scan(lambda s, acc: acc * 0.5 + pt.exp(s), sequences=[x], outputs_info=[a], return_updates=False)
    fn = pytensor.function([x, a], [ys, (x * a).sum()])
    ops = {type(n.op) for n in fn.maker.fgraph.apply_nodes}
    assert NativeScan in ops and not ops & {Call, IfElse, Scan}
    return fn


def in_graph():
    """In-graph consumers and folded bodies: the default pipeline keeps a call and a conditional."""
    y = call(lambda v, s: (pt.sin(v) * s).sum(), x, a)
    z = ifelse(a > 0, pt.exp(x).sum(), (x**2).sum())
    w = innergraph.while_loop(lambda s: s < 10.0, lambda s: s * 2.0 + a, a)
    fn = pytensor.function([x, a], [y, z, w])
    assert {Call, IfElse, WhileLoop} <= {type(n.op) for n in fn.maker.fgraph.apply_nodes}
    return fn


def in_graph_scan():
    """An in-graph Scan, kept by excluding innergraph's rewrites."""
    ys = innergraph.scan(lambda s, acc: acc * 0.5 + s, sequences=[x], outputs_info=[a], return_updates=False)
    fn = pytensor.function([x, a], ys, mode=get_default_mode().excluding("innergraph"))
    assert Scan in {type(n.op) for n in fn.maker.fgraph.apply_nodes}
    return fn


def modules_named(data):
    """The modules a pickle imports (every ``find_class``), recorded while loading it here."""
    named = set()

    class Recording(pickle._Unpickler):
        def find_class(self, module, name):
            named.add(module)
            return super().find_class(module, name)

    import io

    Recording(io.BytesIO(data)).load()
    return named


LOADER = textwrap.dedent(
    """
    import copyreg, json, pickle, sys
    import numpy as np
    from pytensor.compile.mode import optdb
    from pytensor.graph.fg import FunctionGraph
    from pytensor.link.basic import Linker

    def innergraph_modules():
        return sorted(m for m in sys.modules if m.split(".")[0] in ("innergraph", "innergraph_pickle"))

    def untouched():
        return {
            "schedule": Linker.schedule.__module__,
            "copyreg": FunctionGraph in copyreg.dispatch_table,
            "rewrites": sorted(n for n in optdb._names if "innergraph" in n),
            "installed": sys.modules["innergraph.core.hooks"].installed() if "innergraph.core.hooks" in sys.modules else None,
        }

    X, A = np.linspace(-1.0, 2.0, 6), 1.5
    report = {}
    with open(sys.argv[1], "rb") as f:
        pytensor_only = pickle.load(f)
    report["pytensor_only"] = [np.asarray(v).tolist() for v in pytensor_only(X, A)]
    report["modules_after_pytensor_only"] = innergraph_modules()
    with open(sys.argv[2], "rb") as f:
        in_graph, in_graph_scan = pickle.load(f)
    report["in_graph"] = [np.asarray(v).tolist() for v in in_graph(X, A)]
    report["in_graph_scan"] = np.asarray(in_graph_scan(X, A)).tolist()
    report["package_ran"] = "innergraph" in sys.modules
    report["after_loading"] = untouched()
    import innergraph  # the user's request, after the loads: installs
    report["after_import"] = {"installed": innergraph.installed(), "rewrites": len(innergraph.rewriting.db.registered())}
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def compiled():
    return {"pytensor_only": pytensor_only(), "in_graph": in_graph(), "in_graph_scan": in_graph_scan()}


@pytest.fixture(scope="module")
def report(compiled, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pickles")
    first, second = folder / "pytensor_only.pkl", folder / "in_graph.pkl"
    first.write_bytes(pickle.dumps(compiled["pytensor_only"]))
    second.write_bytes(pickle.dumps((compiled["in_graph"], compiled["in_graph_scan"])))
    done = subprocess.run(
        [sys.executable, "-c", LOADER, str(first), str(second)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _close(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12)


def test_a_pytensor_only_function_loads_without_importing_innergraph(compiled, report):
    _close(report["pytensor_only"], compiled["pytensor_only"](X, A))
    assert report["modules_after_pytensor_only"] == []


@pytest.mark.monkey_patch_only
def test_in_graph_functions_load_and_run_without_installing(compiled, report):
    _close(report["in_graph"], compiled["in_graph"](X, A))
    _close([report["in_graph_scan"]], [compiled["in_graph_scan"](X, A)])
    assert report["package_ran"] is False  # innergraph's modules were loaded, its __init__ never ran
    assert report["after_loading"] == {"schedule": "pytensor.link.basic", "copyreg": False, "rewrites": [], "installed": False}


def test_import_innergraph_after_loading_still_installs(report):
    from innergraph.rewriting import db

    assert report["after_import"] == {"installed": True, "rewrites": len(db.registered())}


@pytest.mark.monkey_patch_only
def test_what_each_pickle_imports(compiled):
    assert not any(m.split(".")[0].startswith("innergraph") for m in modules_named(pickle.dumps(compiled["pytensor_only"])))
    named = modules_named(pickle.dumps(compiled["in_graph"]))
    assert {m for m in named if m.startswith("innergraph")} == {"innergraph_pickle"}


def test_pickling_leaves_the_function_working_and_loads_in_this_process(compiled):
    for name, fn in compiled.items():
        before = fn(X, A)
        again = pickle.loads(pickle.dumps(fn))
        _close(again(X, A) if name != "in_graph_scan" else [again(X, A)], before if name != "in_graph_scan" else [before])
        _close(fn(X, A) if name != "in_graph_scan" else [fn(X, A)], before if name != "in_graph_scan" else [before])
        fn.maker.fgraph.validate()


def test_forget_innergraph_drops_only_stale_entries(monkeypatch):
    # Rewritten here, not loaded from the store of rewritten graphs: a graph another process stored
    # comes back without the lifted forms' leftovers, and the first assertion would not hold.
    monkeypatch.setenv(rewritten_store.ENV, "off")
    fgraph = pytensor_only().maker.fgraph
    live = set(fgraph.variables)
    clients = {v: list(c) for v, c in fgraph.clients.items() if v in live}
    mentions = lambda v: "innergraph" in type(v.type).__module__ or (  # noqa: E731
        v.owner is not None and "innergraph" in type(v.owner.op).__module__
    )
    assert any(mentions(v) for v in fgraph.clients if v not in live)  # the lifted forms' leftovers
    assert forget_innergraph(fgraph) > 0
    assert forget_innergraph(fgraph) == 0  # idempotent
    assert {v: list(fgraph.clients[v]) for v in live} == clients and set(fgraph.variables) == live
    assert not any(mentions(v) for v in fgraph.clients if v not in live)
    assert any(v not in live for v in fgraph.clients)  # PyTensor's own leftovers stay, as without innergraph


@pytest.mark.monkey_patch_only
def test_uninstall_removes_the_pickling_patch():
    assert copyreg.dispatch_table.get(FunctionGraph) is not None
    innergraph.uninstall()
    try:
        assert FunctionGraph not in copyreg.dispatch_table
    finally:
        innergraph.install()
    assert FunctionGraph in copyreg.dispatch_table


def test_pickled_graph_keeps_the_output_clients_of_outputs_that_mention_innergraph():
    """The dummy ``Output`` clients are in no ``apply_nodes`` but live: forgetting them broke PyTensor's
    Numba Scan conversion of a pickled while-loop gradient (LookupError in insert_deepcopy)."""
    import pickle

    import pytensor.tensor as pt
    from pytensor.graph.fg import FunctionGraph

    import innergraph

    x = pt.dvector("x")
    outs = ifelse(pt.sum(x) > 0, [x * 2.0, x + 1.0], [x, x])
    fgraph = FunctionGraph([x], list(outs), clone=True)
    loaded = pickle.loads(pickle.dumps(fgraph))
    for i, out in enumerate(loaded.outputs):
        node, idx = loaded.get_output_client(i)
        assert node.inputs[idx] is out


xf = pt.fvector("xf")
XF = np.linspace(-1.0, 2.0, 6, dtype="float32")


def _constant_indexing_bodies():
    """Bodies that index with constants (integer ``ScalarType`` constants) beside float64, float32 and int8 constants."""
    y = call(lambda v: v[2] * v[-1], x)
    z = ifelse(a > 0, x[1:3] * 2.0, x[2:4] - 1.0)
    w = call(lambda v: (v[1:4] * np.float32(0.5)).sum() + v[0] * np.int8(3), xf)
    return [y, z, w]


def _bodies(fn):
    """The canonical encodings of ``fn``'s bodies, computed afresh (not a key cached or carried by the pickle)."""
    from innergraph.core.canonical import encode
    from innergraph.core.graph import body_of

    nodes = fn.maker.fgraph.toposort()
    return [encode(body_of(v)) for n in nodes for v in n.inputs if innergraph.is_function(v)]


def _native_constant_indexing():
    from pytensor.ifelse import ifelse as native_ifelse

    w = (xf[1:4] * np.float32(0.5)).sum() + xf[0] * np.int8(3)
    return [x[2] * x[-1], native_ifelse(a > 0, x[1:3] * 2.0, x[2:4] - 1.0), w]


@pytest.mark.parametrize("mode", ["NUMBA", "FAST_RUN"])
def test_a_body_indexing_with_constants_runs_the_same_after_unpickling(mode):
    """A constant's type (its dtype) survives the canonical encoding that a body pickles through (issue 47)."""
    fn = pytensor.function([x, a, xf], _constant_indexing_bodies(), mode=mode)
    assert {Call, IfElse} <= {type(n.op) for n in fn.maker.fgraph.apply_nodes}  # bodies are pickled, not only plain ops
    loaded = pickle.loads(pickle.dumps(fn))
    assert _bodies(loaded) == _bodies(fn)  # encoded afresh: the loaded constants keep their types
    for args in [(X, A, XF), (X, -A, XF)]:
        got, want = loaded(*args), fn(*args)
        _close(got, want)
        assert [np.asarray(g).dtype for g in got] == [np.asarray(w).dtype for w in want]
    vanilla = vanilla_values(lambda: ([x, a, xf], _native_constant_indexing()), [X, A, XF], mode=mode)
    _close(loaded(X, A, XF), vanilla)
