"""innergraph's registration in PyTensor's ``optdb`` (`innergraph.rewriting.db`), queried directly.

What is asserted, without compiling anything:

* where each of innergraph's 17 graph passes runs among PyTensor's: the nearest PyTensor pass
  before and after it in ``optdb``'s order (the order ``SequenceDB.query`` sorts by:
  position, then name), and innergraph's own order; each relation with its reason. Together
  they pin the whole interleaving, so a position that moves a pass past any other pass fails,
  and one that moves it nowhere cannot (the same order is the same pipeline);
* which passes each mode runs (``FAST_RUN``, ``FAST_COMPILE``, ``NUMBA``, ``JAX``, and
  ``excluding`` each tag innergraph's passes carry), which a query of one tag selects (a mode
  whose linker requires nothing), and the node rewriters in ``canonicalize`` and ``specialize``;
* ``innergraph_simplify``'s sub-database: a query gives one rewriter running the selected
  consumer rewrites, in `CONSUMER_REWRITES`' order;
* ``uninstall`` leaves ``optdb`` and its two sub-databases with the rewriters and tags of a
  process that never imported innergraph (the reference: one fresh interpreter), tags a query
  left empty before install included, and takes out only the keys innergraph's registration
  made (another library's tag, emptied meanwhile, stays); it takes out the rest when one pass
  was taken out by hand; ``install`` twice registers once, and refuses (as PyTensor does) a
  name another rewriter holds as a tag, leaving that tag alone; `unregister`;
* ``innergraph_set_rows`` is one walk: the writes its replacements add are not visited.

PyTensor 3.3.6 and 3.3.8 hold the same ``optdb`` (positions, names and tags) around
innergraph's passes (compared, 2026-12-02): the neighbours below are both versions'.
"""

import json
import subprocess
import sys
from functools import partial
from typing import Any

import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_mode, optdb
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import NodeRewriter
from pytensor.tensor.subtensor import IncSubtensor

import innergraph
from innergraph.rewriting import db
from innergraph.rewriting.simplify import CONSUMER_REWRITES, simplify_consumers

OURS = [name for name, *_ in db._REWRITES]
LOCAL = [name for name, *_ in db._LOCAL_REWRITES]

#: The nearest PyTensor pass before and after each of innergraph's, in ``optdb``'s order.
NEIGHBOURS = {
    # Before the lift: PyTensor's split of a loop-invariant Solve works on native Scans only,
    # and its own pass in scan_eqopt1 comes after the lift, too late to see them.
    "innergraph_scan_split_solve": ("merge1", "scan_eqopt1"),
    "innergraph_scan_split_solve_jax": ("merge1", "scan_eqopt1"),
    # Right before PyTensor's first Scan pass (scan_eqopt1: its push-out then finds no native
    # Scan), so merge1.1, useless, canonicalize and stabilize rewrite bodies with the outer graph.
    "innergraph_lift": ("merge1", "scan_eqopt1"),
    # Lifts plain OpFromGraphs right after the Scans, before canonicalize.
    "innergraph_lift_ofg": ("merge1", "scan_eqopt1"),
    # Inlines the constant arguments of the freshly lifted consumers before canonicalize
    # and stabilize look into bodies (as scan_eqopt1 does for native Scans).
    "innergraph_inline_args": ("merge1", "scan_eqopt1"),
    # Outlines the lifted loops right after the lift, before any rewrite of their bodies.
    "innergraph_outline_loops": ("merge1", "scan_eqopt1"),
    # After canonicalize and stabilize (1.5) made the branches and the outer graph canonical
    # (local_elemwise_alloc, 1.52, is the last of the passes that follow stabilize).
    "innergraph_branch": ("local_elemwise_alloc", "scan_eqopt2"),
    # The consumer rewrites after canonicalize and stabilize, before the lowering.
    "innergraph_simplify": ("local_elemwise_alloc", "scan_eqopt2"),
    # On the Scan signature the consumer rewrites left, before the lowering.
    "innergraph_until_to_while": ("local_elemwise_alloc", "scan_eqopt2"),
    # Lowered just before PyTensor's second Scan pass (scan_eqopt2: save-memory, merging),
    # which expects native Scans.
    "innergraph_lower": ("local_elemwise_alloc", "scan_eqopt2"),
    # One walk right after specialize (in it, its change cost specialize a second round);
    # slogdet_specialization (2.1) is merely the next pass.
    "innergraph_set_rows": ("specialize", "slogdet_specialization"),
    # After canonicalize, stabilize, specialize and add_mul_fusion (48) decided what is read;
    # before the fold and the in-place passes.
    "innergraph_ofg_dead_outputs": ("add_mul_fusion", "ifelse_simplify"),
    # After every rewrite that reaches bodies with the outer graph (add_mul_fusion, 48), before
    # elemwise_fusion (49, siblings of two bodies) and the in-place passes (49.5); PyTensor's
    # lazy-IfElse passes (48.8, 48.9) then see the folded graph.
    "innergraph_fold": ("add_mul_fusion", "ifelse_simplify"),
    # Every pass deciding from a constant's value has run (the lazy IfElse's at 48.9 too);
    # before elemwise_fusion (49) copies the numbers into the fused code.
    "innergraph_link_arguments": ("introduce_lazy_ifelse", "elemwise_fusion"),
    # Fuses each folded body on its own after PyTensor's fusion of the outer graph (49) and
    # merge2; py_only (49.1, fast_compile only) sorts after it by name.
    "innergraph_fusion": ("merge2", "py_only"),
    # After the fold and the bodies' fusion; before the in-place passes.
    "innergraph_inline_outlined_loops": ("py_only", "local_alloc_empty_to_zeros"),
    # After the last pass that folds constants, before add_destroy_handler (49.5) and the
    # in-place passes; local_alloc_empty_to_zeros (49.3) sorts after it by name.
    "innergraph_fresh_carries": ("py_only", "local_alloc_empty_to_zeros"),
}

#: innergraph's passes in the order they run (each relation in NEIGHBOURS' comments, and:
#: split_solve before the lift, the lift of Scans before that of OpFromGraphs, both before
#: inline_args and outline_loops; branch, simplify, until_to_while before the lowering;
#: ofg_dead_outputs before the fold, the fold before link_arguments and the bodies' fusion,
#: which precedes inline_outlined_loops (it inlines fused bodies) and fresh_carries).
ORDER = [
    "innergraph_scan_split_solve",
    "innergraph_scan_split_solve_jax",
    "innergraph_lift",
    "innergraph_lift_ofg",
    "innergraph_inline_args",
    "innergraph_outline_loops",
    "innergraph_branch",
    "innergraph_simplify",
    "innergraph_until_to_while",
    "innergraph_lower",
    "innergraph_set_rows",
    "innergraph_ofg_dead_outputs",
    "innergraph_fold",
    "innergraph_link_arguments",
    "innergraph_fusion",
    "innergraph_inline_outlined_loops",
    "innergraph_fresh_carries",
]


def optdb_order() -> list[str]:
    """Every pass of ``optdb``, in the order ``SequenceDB.query`` sorts the selected ones."""
    return sorted(optdb.__position__, key=lambda name: (optdb.__position__[name], name))


def run_by(mode: Any) -> list[str]:
    """The names of the graph passes ``mode`` runs, in order (its query with its linker's required and incompatible rewrites)."""
    return [rewriter.name for rewriter in optdb.query(mode._optimizer).data]


def test_the_sort_is_the_one_a_query_makes() -> None:
    order = optdb_order()
    ran = run_by(get_mode("FAST_RUN"))
    assert ran == [name for name in order if name in ran]
    assert "innergraph_fusion" in ran and "innergraph_fold" in ran


def test_each_pass_sits_between_its_pytensor_neighbours() -> None:
    order = optdb_order()
    assert [name for name in order if name in NEIGHBOURS] == ORDER == OURS
    for name, (before, after) in NEIGHBOURS.items():
        at = order.index(name)
        pytensors = [(i, other) for i, other in enumerate(order) if other not in NEIGHBOURS]
        previous = max((i, other) for i, other in pytensors if i < at)[1]
        following = min((i, other) for i, other in pytensors if i > at)[1]
        assert (name, previous, following) == (name, before, after)


def test_the_fold_comes_before_fusion_and_every_in_place_pass() -> None:
    """The design's invariant (design/architecture.md): no in-place rewrite and no fusion of siblings sees a hidden node."""
    order = optdb_order()
    inplace = [name for name in order if optdb.__db__[name] & optdb.__db__["inplace"]]
    assert inplace and "add_destroy_handler" in inplace
    assert order.index("innergraph_fold") < min(order.index(name) for name in [*inplace, "elemwise_fusion"])
    assert order.index("innergraph_fold") > order.index("add_mul_fusion")


#: The graph passes of innergraph each mode runs.
FAST_RUN = [name for name in ORDER if name != "innergraph_scan_split_solve_jax"]
NOT_JAX = {"innergraph_scan_split_solve", "innergraph_fusion"}


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (get_mode("FAST_RUN"), FAST_RUN),
        (get_mode("NUMBA"), FAST_RUN),
        # JAX's mode excludes fusion, and its linker PyTensor's split of solves (it has the jax twin)
        (get_mode("JAX"), [name for name in ORDER if name not in NOT_JAX]),
        # the fold alone: graphs built with in-graph consumers must link
        (get_mode("FAST_COMPILE"), ["innergraph_fold"]),
        (get_mode("FAST_RUN").excluding("innergraph"), ["innergraph_fold", "innergraph_fusion"]),
        (get_mode("FAST_RUN").excluding("fusion"), [name for name in FAST_RUN if name != "innergraph_fusion"]),
        (get_mode("FAST_RUN").excluding("innergraph_ofg"), [n for n in FAST_RUN if n not in {"innergraph_lift_ofg", "innergraph_ofg_dead_outputs"}]),
        (get_mode("FAST_RUN").excluding("scan_until_to_while"), [n for n in FAST_RUN if n != "innergraph_until_to_while"]),
        # PyTensor's Scan tags reach the passes that stand in for its Scan rewrites
        (get_mode("FAST_RUN").excluding("scan"), [n for n in FAST_RUN if n != "innergraph_scan_split_solve"]),
        (get_mode("FAST_RUN").excluding("scan_pushout"), [n for n in FAST_RUN if n != "innergraph_scan_split_solve"]),
        (get_mode("FAST_RUN").excluding("scan_split_non_sequence_decomposition_and_solve"), [n for n in FAST_RUN if n != "innergraph_scan_split_solve"]),
        (get_mode("JAX").excluding("scan_split_non_sequence_decomposition_and_solve_jax"),
         [n for n in ORDER if n not in NOT_JAX | {"innergraph_scan_split_solve_jax"}]),
        (get_mode("JAX").excluding("scan"), [n for n in ORDER if n not in NOT_JAX | {"innergraph_scan_split_solve_jax"}]),
        (get_mode("FAST_RUN").excluding("scan_inline_invariant_constants"), [n for n in FAST_RUN if n != "innergraph_inline_args"]),
        (get_mode("FAST_RUN").excluding("scan_merge_duplicate_inputs"), [n for n in FAST_RUN if n != "innergraph_inline_args"]),
        (get_mode("FAST_RUN").excluding("minimum_compile"), [n for n in FAST_RUN if n != "innergraph_fold"]),
    ],
    ids=["FAST_RUN", "NUMBA", "JAX", "FAST_COMPILE", "-innergraph", "-fusion", "-innergraph_ofg", "-scan_until_to_while", "-scan",
         "-scan_pushout", "-split_solve", "JAX-split_solve_jax", "JAX-scan", "-inline_invariant", "-merge_duplicate", "-minimum_compile"],
)
def test_which_passes_a_mode_runs(mode: Any, expected: list[str]) -> None:
    assert [name for name in run_by(mode) if name in NEIGHBOURS] == expected


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("fast_run", FAST_RUN),
        # every linker PyTensor defines requires minimum_compile, so the fold's fast_compile and
        # fast_run tags show in a query of the database alone (a linker that requires nothing)
        ("fast_compile", ["innergraph_fold"]),
        ("minimum_compile", ["innergraph_fold"]),
        ("innergraph", [n for n in ORDER if n not in {"innergraph_fold", "innergraph_fusion"}]),
        ("innergraph_ofg", ["innergraph_lift_ofg", "innergraph_ofg_dead_outputs"]),
        ("jax", ["innergraph_scan_split_solve_jax"]),
        ("fusion", ["innergraph_fusion"]),
        ("scan", ["innergraph_scan_split_solve", "innergraph_scan_split_solve_jax"]),
    ],
)
def test_which_passes_a_tag_selects(tag: str, expected: list[str]) -> None:
    """A query of ``optdb`` itself (``Mode(linker, RewriteDatabaseQuery(include=[tag]))`` without the linker's requirements)."""
    assert [r.name for r in optdb.query(f"+{tag}").data if r.name in NEIGHBOURS] == expected


def test_every_pass_runs_under_its_own_name_alone() -> None:
    for name in ORDER:
        assert [r.name for r in optdb.query(f"+{name}").data] == [name]


def _node_rewriters(mode: Any, database: str) -> list[str]:
    """The names of the node rewriters of ``database`` that ``mode``'s query of ``optdb`` selects."""
    (pass_,) = [r for r in optdb.query(mode._optimizer).data if r.name == database]
    return [r.name for r in pass_.get_node_rewriters() if getattr(r, "name", None) in LOCAL]


def test_the_node_rewriters_sit_in_canonicalize_and_specialize() -> None:
    fast_run = get_mode("FAST_RUN")
    canonical = {"innergraph_sum_of_one_row", "innergraph_read_of_written_region", "innergraph_fill_read_by_consumers"}
    special = {"innergraph_merge_slices_of_known_length", "innergraph_nested_zero_increments", "innergraph_one_hot_increment"}
    assert set(_node_rewriters(fast_run, "canonicalize")) == canonical
    assert set(_node_rewriters(fast_run, "specialize")) == special
    assert _node_rewriters(fast_run.excluding("innergraph"), "canonicalize") == []
    assert _node_rewriters(fast_run.excluding("innergraph"), "specialize") == []
    assert _node_rewriters(get_mode("FAST_COMPILE"), "canonicalize") == []
    for name in canonical:
        assert set(_node_rewriters(fast_run.excluding(name), "canonicalize")) == canonical - {name}
    # copies of canonicalize (PyMC's) hold the ones registered in it
    assert {r.name for r in db._copied_rewriters()} == canonical


def _chosen(rewriter: Any) -> list[Any]:
    """The consumer rewrites ``rewriter`` (a query of ``innergraph_simplify``) runs."""
    assert isinstance(rewriter, db.FunctionRewriter) and isinstance(rewriter.fn, partial) and rewriter.fn.func is simplify_consumers
    return list(rewriter.fn.keywords["rewrites"])


def test_simplify_runs_the_selected_consumer_rewrites_in_their_order() -> None:
    every = [rewrite for rewrite, _ in CONSUMER_REWRITES]
    database = optdb["innergraph_simplify"]
    assert isinstance(database, db.ConsumerRewritesDB)
    chosen = database.query("+fast_run")
    assert _chosen(chosen) == every
    pushout = {rewrite for rewrite, tags in CONSUMER_REWRITES if "scan_pushout" in tags}
    assert len(pushout) == 3
    assert _chosen(database.query("+fast_run", "-scan_pushout")) == [r for r in every if r not in pushout]
    assert _chosen(database.query("+innergraph", "-scan_merge")) == [
        r for r, tags in CONSUMER_REWRITES if "scan_merge" not in tags
    ]
    assert _chosen(database.query("+fast_compile")) == []
    # the mode's query of optdb reaches the sub-database with its exclusions
    (simplify,) = [r for r in optdb.query(get_mode("FAST_RUN").excluding("scan_remove_unused")._optimizer).data
                   if r.name == "innergraph_simplify"]
    assert [r.__name__ for r in _chosen(simplify)] == [r.__name__ for r in every if r.__name__ != "remove_dead_slots"]


def test_a_function_rewriter_returns_what_its_function_returns() -> None:
    fgraph = FunctionGraph([], [], clone=False)
    seen: list[FunctionGraph] = []

    def seven(graph: FunctionGraph) -> int:
        seen.append(graph)
        return 7

    rewriter = db.FunctionRewriter(seven)
    assert rewriter.apply(fgraph) == 7 and seen == [fgraph]
    features = list(fgraph._features)
    rewriter.add_requirements(fgraph)
    assert fgraph._features == features


def _members(database: Any) -> dict[str, list[str]]:
    """The non-empty keys of ``database`` (names and tags), each with its members' names."""
    return {key: sorted(getattr(r, "name", None) or type(r).__name__ for r in members) for key, members in database.__db__.items() if members}


def _state() -> dict[str, Any]:
    """``optdb``'s and its two sub-databases' keys with their members, and ``optdb``'s positions (as JSON gives them back)."""
    state = {"optdb": _members(optdb), "canonicalize": _members(optdb["canonicalize"]), "specialize": _members(optdb["specialize"]),
             "positions": dict(optdb.__position__)}
    return json.loads(json.dumps(state))


_VANILLA = """
import importlib, json, sys
from typing import Any
from pytensor.compile.mode import optdb
for module in sys.argv[1:]:
    importlib.import_module(module)
{}
{}
print(json.dumps(_state()))
"""

_vanilla: dict[tuple[str, ...], dict[str, Any]] = {}


def vanilla() -> dict[str, Any]:
    """The state of a process that imports the PyTensor modules this one has imported, and not innergraph.

    Only on a released PyTensor (its tests are ``monkey_patch_only``): a PyTensor built from the
    series registers innergraph's rewrites when it is imported, and has no state without them.

    Importing a module of PyTensor can register rewrites (``pytensor.sparse`` registers its own
    when a test file of the same process compiled one): the reference imports the same ones.
    """
    import inspect

    modules = tuple(sorted(name for name in sys.modules if (name == "pytensor" or name.startswith("pytensor.")) and "innergraph" not in name))
    if modules not in _vanilla:
        script = _VANILLA.format(inspect.getsource(_members), inspect.getsource(_state))
        out = subprocess.run([sys.executable, "-c", script, *modules], capture_output=True, text=True, check=True)
        _vanilla[modules] = json.loads(out.stdout)
    return _vanilla[modules]


def _leftovers() -> list[tuple[str, str]]:
    """Keys of innergraph's names or its own tags left in ``optdb`` or the two sub-databases, empty ones included.

    Only the keys its registration makes: a query made while it is installed, excluding a name
    not in the database queried (``-innergraph_sum_of_one_row`` of ``optdb``), leaves its own
    empty key, which no query sees (PyTensor's queries do the same with any tag).
    """
    tags = {"innergraph", "innergraph_ofg", "scan_until_to_while", "FunctionRewriter", "ConsumerRewritesDB",
            "scan_split_non_sequence_decomposition_and_solve_jax"}
    local = {where: {name for name, _, at, _ in db._LOCAL_REWRITES if at == where} | {"innergraph"} for where in ("canonicalize", "specialize")}
    databases = {"optdb": (optdb, {*OURS, *tags}), **{where: (optdb[where], names) for where, names in local.items()}}
    return [(where, key) for where, (database, ours) in databases.items() for key in database.__db__ if key in ours]


@pytest.mark.monkey_patch_only
def test_uninstall_leaves_the_databases_of_a_process_without_innergraph() -> None:
    installed = _state()
    assert installed != vanilla() and set(db.registered()) == {*OURS, *LOCAL}
    with innergraph.uninstalled():
        assert db.registered() == []
        assert _state() == vanilla()
        assert _leftovers() == []
    assert db.registered() == [*OURS, *LOCAL]
    assert _state() == installed


def test_install_twice_registers_once() -> None:
    before = _state()
    innergraph.install()
    db.register_all()
    assert _state() == before
    assert len(db.registered()) == 23


@pytest.mark.monkey_patch_only
def test_a_name_or_tag_a_query_left_empty_before_install() -> None:
    """A query excluding ``innergraph_lift`` or ``innergraph`` while uninstalled (a mode unpickled from a lowered Scan) creates empty keys."""
    with innergraph.uninstalled():
        run_by(get_mode("FAST_RUN").excluding("innergraph_lift", "innergraph", "innergraph_sum_of_one_row"))
        optdb["canonicalize"].query("-innergraph_sum_of_one_row", "-innergraph", "+fast_run")
        assert optdb.__db__["innergraph_lift"] == set() and optdb.__db__["innergraph"] == set()
        assert optdb["canonicalize"].__db__["innergraph"] == set()
        innergraph.install()
        try:
            assert db.registered() == [*OURS, *LOCAL]
            assert "innergraph_lift" in run_by(get_mode("FAST_RUN"))
            assert run_by(get_mode("FAST_RUN").excluding("innergraph")).count("innergraph_lift") == 0
        finally:
            innergraph.uninstall()
        # the keys the query had left empty are innergraph's: uninstall takes them out
        assert _leftovers() == []
        assert _state() == vanilla()


def test_uninstall_keeps_a_tag_another_rewriter_took_up(registered_nothing: Any) -> None:
    with registered_nothing(optdb, "someone_elses", "innergraph_ofg", position=70) as rewriter:
        with registered_nothing(optdb["specialize"], "someone_elses_local", "innergraph") as local:
            with innergraph.uninstalled():
                assert optdb.__db__["innergraph_ofg"] == {rewriter}
                assert optdb["specialize"].__db__["innergraph"] == {local}
                assert "innergraph" not in optdb.__db__
            assert optdb.__db__["innergraph_ofg"] == {rewriter, optdb["innergraph_lift_ofg"], optdb["innergraph_ofg_dead_outputs"]}


class _Local(NodeRewriter):
    def transform(self, fgraph: Any, node: Any, enforce_tracks: bool = True, *args: Any, **kwargs: Any) -> bool:
        return False


def test_unregister_takes_a_rewriter_out_of_every_tag_and_keeps_the_tag_keys() -> None:
    database = optdb["specialize"]
    rewriter = _Local()
    database.register("test_db_direct_local", rewriter, "fast_run", "test_db_direct_tag")
    assert rewriter in database.__db__["test_db_direct_tag"] and "test_db_direct_local" in database._names
    db.unregister(database, "test_db_direct_local", rewriter)
    try:
        assert "test_db_direct_local" not in database._names and "test_db_direct_local" not in database.__db__
        assert database.__db__["test_db_direct_tag"] == set()
        assert not any(rewriter in members for members in database.__db__.values())
    finally:
        database.__db__.pop("test_db_direct_tag", None)
        database.__db__.pop("_Local", None)
    graph = db.FunctionRewriter(len)
    optdb.register("test_db_direct_pass", graph, "test_db_direct_tag", position=70.5)
    db.unregister(optdb, "test_db_direct_pass", graph)
    try:
        assert "test_db_direct_pass" not in optdb.__position__ and "test_db_direct_pass" not in optdb._names
        assert optdb.__db__["test_db_direct_tag"] == set()
        assert not any(graph in members for members in optdb.__db__.values())
    finally:
        optdb.__db__.pop("test_db_direct_tag", None)


def test_uninstall_leaves_a_tag_another_library_emptied_while_installed(registered_nothing: Any) -> None:
    """Only the keys innergraph's registration made go: an emptied tag of another library stays, as PyTensor leaves it."""
    with innergraph.uninstalled():
        with registered_nothing(optdb, "someone_elses", "someone_elses_tag", position=70):
            pass
        assert "someone_elses_tag" in optdb.__db__ and not optdb.__db__["someone_elses_tag"]  # PyTensor alone: the key stays
        optdb.__db__.pop("someone_elses_tag")
        with registered_nothing(optdb, "someone_elses", "someone_elses_tag", position=70):
            innergraph.install()
        assert "someone_elses_tag" in optdb.__db__ and not optdb.__db__["someone_elses_tag"]
        innergraph.uninstall()
        try:
            assert "someone_elses_tag" in optdb.__db__ and not optdb.__db__["someone_elses_tag"]
            assert _leftovers() == []
        finally:
            optdb.__db__.pop("someone_elses_tag", None)


def test_uninstall_takes_out_the_rest_when_one_pass_was_taken_out_before() -> None:
    lift = optdb["innergraph_lift"]
    db.unregister(optdb, "innergraph_lift", lift)
    assert db.registered() == [name for name in [*OURS, *LOCAL] if name != "innergraph_lift"]
    with innergraph.uninstalled():
        assert db.registered() == [] and _leftovers() == []
    assert db.registered() == [*OURS, *LOCAL] and optdb["innergraph_lift"] is lift


def test_install_refuses_a_name_another_rewriter_holds_as_a_tag(registered_nothing: Any) -> None:
    """PyTensor refuses to register a name that is a non-empty tag; install leaves the other rewriter's tag alone."""
    with innergraph.uninstalled():
        with registered_nothing(optdb, "someone_elses", "innergraph_lift", position=70) as rewriter:
            with pytest.raises(ValueError, match="innergraph_lift"):
                db.register_all()
            try:
                assert optdb.__db__["innergraph_lift"] == {rewriter} and "innergraph_lift" not in optdb._names
                # the passes before it in the table are registered, the rest not
                assert db.registered() == OURS[: OURS.index("innergraph_lift")]
            finally:
                db.unregister_all()
        assert db.registered() == []
    assert db.registered() == [*OURS, *LOCAL]


def test_set_rows_walks_the_graph_once(monkeypatch: Any) -> None:
    """``innergraph_set_rows`` visits each node of the graph once, not the nodes its replacements add (one walk after specialize)."""
    rewriter = optdb["innergraph_set_rows"]
    x, v = pt.dmatrix("x"), pt.dvector("v")
    fgraph = FunctionGraph([x, v], [pt.set_subtensor(x[1:2], v[None])], clone=False)
    (written,) = [node for node in fgraph.apply_nodes if isinstance(node.op, IncSubtensor)]
    visited: list[Any] = []
    process_node = rewriter.process_node

    def visit(graph: FunctionGraph, node: Any, *args: Any, **kwargs: Any) -> Any:
        visited.append(node)
        return process_node(graph, node, *args, **kwargs)

    monkeypatch.setattr(rewriter, "process_node", visit)
    rewriter.rewrite(fgraph)
    row = fgraph.outputs[0].owner
    assert isinstance(row.op, IncSubtensor) and row is not written and row.inputs[:2] == [x, v]  # x[1] = v
    assert visited == [written]  # the ExpandDims was pruned with the write; the new write is not visited
