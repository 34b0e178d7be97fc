"""What goes into which patch of the upstream series: module copies, direct edits, messages.

`SERIES` lists the five patches in order. Each library module (a path under
``innergraph/``, plus the top-level ``innergraph_pickle``) is either in exactly one
patch's ``modules`` (`ASSIGNED`) or in `LIBRARY_ONLY`; `unassigned` names the others,
and the build refuses to run while there are any. `EDITS` are the direct changes of
PyTensor's files; each one that stands for a monkey-patch record of
`innergraph.patching` names that record in ``replaces`` (``"Linker.schedule"``), and
`paired` checks that every record innergraph applies has one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from innergraph.startup.shipped import SERIES_ORDER, SHIPPED

__all__ = [
    "ASSIGNED",
    "EDITS",
    "LIBRARY_ONLY",
    "SERIES",
    "Delegate",
    "Edit",
    "PatchSpec",
    "library_modules",
    "unassigned",
]


@dataclass(frozen=True)
class Edit:
    """Insert ``text`` into PyTensor's ``file`` between ``before`` and ``after``, whose concatenation occurs once."""

    file: str
    before: str
    after: str
    text: str
    replaces: str = ""  # the monkey-patch record this edit is the upstream form of ("Owner.name")


@dataclass(frozen=True)
class Delegate:
    """PyTensor's ``def name`` (in ``file``, a method of ``cls`` if given) becomes ``_name_base``; ``name`` delegates.

    The new ``name`` calls ``module.replacement`` (innergraph's replacement, the very
    function the monkey-patch record installs) while innergraph is installed and
    ``_name_base`` otherwise (`innergraph.core.hooks.hook`); the replacement reaches
    PyTensor's body through `innergraph.core.hooks.original`.
    """

    file: str
    name: str
    module: str
    replacement: str
    cls: str = ""
    replaces: str = ""

    def source(self, indent: str) -> str:
        """The new ``def name``, indented by ``indent``, that PyTensor's file gets before ``def _name_base``."""
        base = f"_{self.name}_base"
        owner = f"{self.cls}.{base}" if self.cls else base
        return (
            f"{indent}def {self.name}(*args, **kwargs):\n"
            f'{indent}    """`{self.module}.{self.replacement}` while innergraph is enabled, else `{base}`."""\n'
            f"{indent}    from pytensor.innergraph.core.hooks import hook\n\n"
            f'{indent}    return hook("{self.module}", "{self.replacement}", {owner})(*args, **kwargs)\n\n'
            + ("\n" if not self.cls else "")
        )


@dataclass(frozen=True)
class PatchSpec:
    slug: str
    subject: str
    message: str
    modules: tuple[str, ...]
    edits: tuple[Edit | Delegate, ...] = field(default=())


LIBRARY_ONLY: frozenset[str] = frozenset(
    {
        "startup/supported.py",  # the version check of the monkey-patching form
        "startup/__init__.py",
        "startup/upstream.py",  # `import innergraph` on a patched PyTensor (aliasing)
        "startup/shipped.py",  # what each patch ships (read by upstream.py and this generator)
        "__main__.py",  # `python -m innergraph`: hands over to innergraph_bench
        "testing/__init__.py",  # the test kit of innergraph's own suite
        "testing/assertions.py",
        "testing/isolated.py",
        "testing/kit.py",
        "testing/programs.py",
        "testing/recipes.py",
        "testing/rewrites.py",
    }
)

_TESTED = """Tested: PyTensor's own test files at 3.3.8, each test's outcome as
without this series, and innergraph's test suite, run on a PyTensor with the
series applied patch by patch (innergraph's CI, `.ci/patched`)."""

_REPRESENTATION = PatchSpec(
    slug="innergraph-representation",
    subject="innergraph: control-flow bodies as function-typed graph variables",
    message=f"""Scan, IfElse and OpFromGraph keep their bodies as private inner graphs
that the outer graph's rewrites never see: a body is rewritten on its own,
twice when two loops share it, and never with what surrounds it.

This adds the in-graph representation those Ops can share instead, under
pytensor.innergraph, with no change of behaviour yet (nothing imports it):

core/, the body representation, which knows no consumer:

- core/types.py: InnerGraphType, the type of a function variable, and Body,
  the folded (constant) form of a body;
- core/graph.py: NominalVariable params, the InnerGraph Op that turns a body
  (ordinary Apply nodes over params) into a function variable, and the
  closed-body verification (a body may only read its params and constants);
- core/canonical.py: the canonical encoding that makes alpha-equivalent
  bodies equal (merge, caching);
- core/build.py, core/instantiate.py: closure conversion of a callable,
  scope-aware substitution of params;
- core/fold.py, hidden_folds.py, interning.py: folding function variables
  into constants before linking (and unfolding them into rewritable nodes),
  one Body per final body;
- core/errors.py, compat.py, hooks.py, dispatch.py, and _pickle.py: errors
  naming the offending variable, PyTensor internals, the records the hooks
  of the next patch use, which linker compiles, pickles that load without
  enabling anything.

protocol/, how a consumer declares itself: its slots and their meanings
(slots.py), its step semantics and their plans (semantics.py, plans.py),
default shapes (shapes.py), any consumer node read as slots (signature.py),
running bodies in Python (runtime.py), the lift/lower engine (conversion.py).

Review first: core/graph.py (InnerGraph, closed bodies) and core/fold.py
(the one place bodies become constants).

{_TESTED}""",
    modules=SHIPPED["innergraph-representation"],
)

_HOOKS = PatchSpec(
    slug="innergraph-hooks",
    subject="Call innergraph's hooks from the linker, printing, pickling, DebugMode, Scan's gradient and JAX's dispatch",
    message=f"""Seven places of PyTensor need to know about function variables. Each
calls one function of pytensor.innergraph.patching through
pytensor.innergraph.core.hooks.call_hook, which imports it only while
innergraph is enabled (the last patch does that) and otherwise returns
what PyTensor computed before:

- Linker.schedule: prepare_schedule folds the function variables that
  consumers read into constants, so no linker allocates storage or makes
  thunks for a body, and hands consumers a backend cannot run over as
  PyTensor's own Ops;
- debugprint: appends a "Bodies:" section listing each folded body once;
- FunctionGraph.__getstate__: before_pickle drops the features' memories of
  in-graph forms, so a compiled function that holds only PyTensor's Ops
  pickles without any reference to innergraph;
- DebugMode's _find_bad_optimizations: leaves out the records of in-place
  rewrites the graph refused and reverted (checking them evaluates a node
  that never runs; see the module docstring for the #1669 graph);
- Scan.pullback: checkpointed gradients when a checkpoint policy applies.
- pytensor.link.jax.dispatch: dispatch_loaded loads innergraph's JAX
  conversions with the dispatch, so a graph converted by jax_funcify
  without a linker (PyMC's get_jaxified_graph) finds them;
- FunctionMaker.prepare_fgraph: delegates to prepare_fgraph of
  pytensor.innergraph.patching.rewritten, which rewrites a graph once per
  machine: it keys the graph before rewriting (the graph, its specs, the
  mode, the rewrite database, the code, the configuration) and takes the
  rewritten graph from a store in the compile directory when another
  process has rewritten the same graph before.

The library that carries this change for released PyTensor installs the
same functions as monkey-patches; these edits are their upstream form.

{_TESTED}""",
    modules=SHIPPED["innergraph-hooks"],
    edits=(
        Edit(
            "pytensor/link/basic.py",
            '        """\n',
            "        if callable(self._scheduler):",
            "        from pytensor.innergraph.core.hooks import call_hook\n\n"
            '        call_hook("pytensor.innergraph.patching.linker", "prepare_schedule", None, self, fgraph)\n\n',
            replaces="Linker.schedule",
        ),
        Edit(
            "pytensor/printing.py",
            "",
            '    if file is _file:\n        return file\n    elif file == "str":',
            "    from pytensor.innergraph.core.hooks import call_hook\n\n"
            '    _file.write(call_hook("pytensor.innergraph.patching.printing", "bodies_section", "", graph_like, used_ids))\n\n',
            replaces="printing.debugprint",
        ),
        Edit(
            "pytensor/graph/fg.py",
            "    def __getstate__(self):\n",
            "        d = self.__dict__.copy()\n        d.pop(\"_execute_callbacks_times_dict\", None)",
            "        from pytensor.innergraph.core.hooks import call_hook\n\n"
            '        call_hook("pytensor.innergraph.patching.pickling", "before_pickle", None, self)\n\n',
            replaces="copyreg.dispatch_table[FunctionGraph]",
        ),
        Edit(
            "pytensor/compile/debug/debugmode.py",
            '    graph).\n\n    """\n',
            "    for i, node in enumerate(order):",
            "    from pytensor.innergraph.core.hooks import call_hook\n\n"
            '    reasons = call_hook("pytensor.innergraph.patching.debugmode", "without_refused_in_place", reasons, order, reasons)\n\n',
            replaces="debugmode._find_bad_optimizations",
        ),
        Edit(
            "pytensor/scan/op.py",
            "    def pullback(self, inputs, outs, dC_douts):\n",
            "",
            "        from pytensor.innergraph.core.hooks import call_hook\n\n"
            '        grads = call_hook("pytensor.innergraph.patching.gradient", "checkpointed_pullback", None, outs, dC_douts)\n'
            "        if grads is not None:\n"
            "            return grads\n\n",
            replaces="Scan.pullback",
        ),
        Edit(
            "pytensor/link/jax/dispatch/__init__.py",
            "# isort: on\n",
            "",
            "\nfrom pytensor.innergraph.core.hooks import call_hook  # noqa: E402\n\n"
            'call_hook("pytensor.innergraph.patching.on_import", "dispatch_loaded", None, __name__)\n',
            replaces="sys.meta_path[ImportHook]",
        ),
        Delegate(
            "pytensor/compile/maker.py",
            "prepare_fgraph",
            "pytensor.innergraph.patching.rewritten",
            "prepare_fgraph",
            cls="FunctionMaker",
            replaces="FunctionMaker.prepare_fgraph",
        ),
    ),
)

_CONSUMERS = PatchSpec(
    slug="innergraph-consumers",
    subject="innergraph: in-graph Scan, IfElse, Call and loops that take bodies as inputs",
    message=f"""The consumers of function variables: Ops that take a body as an ordinary
input, so the outer graph's rewrites reach it (merge, canonicalize,
stabilize, specialize all see the body's nodes).

- ops/scan.py: Scan over a body, with PyTensor's ScanInfo layout, and the
  lowering to PyTensor's own Scan;
- ops/ifelse.py, ops/call.py: the lazy conditional and the in-graph
  OpFromGraph;
- ops/loop.py (+ loop_build.py, loop_derivatives.py), loops.py: while_loop,
  do_while, fori_loop and Loop;
- ops/checkpoint.py: checkpointed gradients of Scans;
- lifting/rules.py, lifting/handover.py: lifting PyTensor's own
  Scan/IfElse/OpFromGraph into the in-graph form and back, and handing
  consumers over as native Ops to a linker that cannot run them;
- builders.py, consumer.py, stats.py: pytensor.scan and op_from_graph
  building in-graph consumers, the contributor API, graph statistics.

Still inert: nothing enables innergraph yet.

{_TESTED}""",
    modules=SHIPPED["innergraph-consumers"],
)

_REWRITES = PatchSpec(
    slug="innergraph-rewrites",
    subject="Register innergraph's rewrites in optdb and enable it on import",
    message=f"""Registers the passes of pytensor.innergraph.rewriting in optdb (and two
node rewriters in canonicalize/specialize; the table is in
rewriting/db.py): PyTensor's Scans are lifted into the in-graph form at
0.04, rewritten together with the outer graph, lowered back at 1.59 before
scan_eqopt2, and function variables are folded into constants at 48.5,
before fusion and the in-place rewrites. `import pytensor` now imports
pytensor.innergraph, which registers them and enables the hooks (and
the backends, loaded on a Numba or JAX linker's first link);
mode.excluding("innergraph") gives the previous pipeline back (the fold
stays: graphs built with in-graph consumers must still link).

Two of PyTensor's passes are replaced under their own names and tags:
scan_make_inplace decides once per Scan Op that loops share, and
topo_constant_folding folds an OpFromGraph of constants in Python, node
by node, where PyTensor's would link its inner graph with C thunks (a C
compilation per inner node kind on an empty compile cache).

Every rewrite is deterministic and tagged with the tags of the Scan
rewrites it stands in for (excluding "scan_pushout" excludes its
counterpart).

{_TESTED}""",
    modules=SHIPPED["innergraph-rewrites"],
    edits=(
        Edit(
            "pytensor/__init__.py",
            "",
            "# Some config variables are registered by submodules. Only after all those",
            "# Control-flow bodies as graph inputs: registers innergraph's rewrites in\n"
            "# optdb and enables its hooks (see pytensor/innergraph/rewriting/db.py).\n"
            "import pytensor.innergraph\n\n",
        ),
    ),
)

_BACKENDS = PatchSpec(
    slug="innergraph-backends",
    subject="innergraph: Numba and JAX implementations of the consumers",
    message=f"""The Numba and JAX conversions of the in-graph consumers (a body compiled
once however many consumers read it), loaded on a linker's first link
once innergraph is enabled.
Ten functions of PyTensor delegate to innergraph while it is enabled,
keeping their body as _<name>_base:

- numba's numba_funcify_ensure_cache: equal nodes of one conversion
  (native Scans of one Op among them) convert once;
- numba's numba_funcify_Scan: a step body of eight nodes or more is
  compiled once as its own unit, cached under its own key, and called
  by reference (through a pointer the loop fetches on its first call),
  so no caller's LLVM module holds its code again;
- numba's numba_funcify_OpFromGraph: an inner graph of eight nodes or
  more is likewise compiled once and called by reference;
- numba's numba_funcify_FunctionGraph: records each converted inner
  graph for numba_funcify_Scan and numba_funcify_OpFromGraph (the
  conversion is PyTensor's);
- numba's cache_key_for_constant: a folded body whose Ops do not pickle
  gets a key of its own instead of failing the conversion;
- NumbaLinker.fgraph_convert, create_thunk_inputs and jit_compile: the
  function's floating-point constants are passed as arguments (the code
  and its cache key do not depend on their values) and the converted
  graph is compiled once, as the final function;
- JAXLinker.jit_compile: a graph with a while loop, or with a Scan whose
  trip count is not a constant, falls back to eager execution where
  jax.jit cannot trace it;
- JAX's jax_funcify_Scan: a while-loop Scan, or one whose mit-mot writes
  before its oldest input tap, runs as a loop of its own (scan_as_loop);
  other Scans convert as before, their mit-mot taps shifted.

Still inert: nothing enables innergraph yet (the next patch does), so
each delegate calls PyTensor's own body.

The rest are registrations with PyTensor's dispatchers, made while
innergraph is enabled: the consumers' conversions, and a Numba conversion
for FunctionGraph, which converts a graph as one conversion (the bodies
its consumers inline convert their equal nodes once) by calling
numba_funcify_FunctionGraph. PyTensor registers that function for
AbstractFunctionGraph, so it stays registered for the frozen inner graphs
of Scan and OpFromGraph (delegating, above, to record them).

{_TESTED}""",
    modules=SHIPPED["innergraph-backends"],
    edits=(
        Delegate(
            "pytensor/link/numba/dispatch/basic.py",
            "numba_funcify_ensure_cache",
            "pytensor.innergraph.backends.numba_code",
            "convert_once",
            replaces="numba_basic.numba_funcify_ensure_cache",
        ),
        Delegate(
            "pytensor/link/numba/dispatch/scan.py",
            "numba_funcify_Scan",
            "pytensor.innergraph.backends.numba",
            "funcify_scan_by_reference",
            replaces="numba_funcify_and_cache_key[Scan]",
        ),
        Delegate(
            "pytensor/link/numba/dispatch/compile_ops.py",
            "numba_funcify_OpFromGraph",
            "pytensor.innergraph.backends.numba",
            "funcify_ofg_by_reference",
            replaces="numba_funcify_and_cache_key[OpFromGraph]",
        ),
        Delegate(
            "pytensor/link/numba/dispatch/basic.py",
            "numba_funcify_FunctionGraph",
            "pytensor.innergraph.backends.numba",
            "funcify_other_fgraph",
            replaces="numba_funcify_and_cache_key[AbstractFunctionGraph]",
        ),
        Delegate(
            "pytensor/link/numba/dispatch/tensor_basic.py",
            "numba_funcify_Alloc",
            "pytensor.innergraph.backends.numba_slices",
            "funcify_alloc",
            replaces="numba_funcify_and_cache_key[Alloc]",
        ),
        Delegate(
            "pytensor/link/numba/dispatch/basic.py",
            "cache_key_for_constant",
            "pytensor.innergraph.backends.numba",
            "cache_key_for_constant",
            replaces="numba_basic.cache_key_for_constant",
        ),
        Delegate(
            "pytensor/link/numba/linker.py",
            "fgraph_convert",
            "pytensor.innergraph.backends.numba_link",
            "fgraph_convert",
            cls="NumbaLinker",
            replaces="NumbaLinker.fgraph_convert",
        ),
        Delegate(
            "pytensor/link/numba/linker.py",
            "create_thunk_inputs",
            "pytensor.innergraph.backends.numba_link",
            "create_thunk_inputs",
            cls="NumbaLinker",
            replaces="NumbaLinker.create_thunk_inputs",
        ),
        Delegate(
            "pytensor/link/numba/linker.py",
            "jit_compile",
            "pytensor.innergraph.backends.numba_link",
            "jit_compile",
            cls="NumbaLinker",
            replaces="NumbaLinker.jit_compile",
        ),
        Delegate(
            "pytensor/link/jax/dispatch/scan.py",
            "jax_funcify_Scan",
            "pytensor.innergraph.backends.jax",
            "jax_funcify_native_scan",
            replaces="jax_funcify[Scan]",
        ),
        Delegate(
            "pytensor/link/jax/linker.py",
            "jit_compile",
            "pytensor.innergraph.backends.jax",
            "jit_compile",
            cls="JAXLinker",
            replaces="JAXLinker.jit_compile",
        ),
    ),
)

#: The series, in order: each patch applies on the previous ones. The backends come before the
#: rewrites, whose patch makes `import pytensor` enable innergraph: every earlier patch is inert,
#: and no PyTensor of the series runs innergraph's rewrites without its Numba and JAX code.
SERIES: tuple[PatchSpec, ...] = (_REPRESENTATION, _HOOKS, _CONSUMERS, _BACKENDS, _REWRITES)

#: Library module -> index in `SERIES` of the patch that ships it.
ASSIGNED: dict[str, int] = {module: i for i, spec in enumerate(SERIES) for module in spec.modules}

#: Every direct edit of PyTensor's files, in series order.
EDITS: tuple[Edit | Delegate, ...] = tuple(edit for spec in SERIES for edit in spec.edits)


def library_modules(root: Path) -> list[str]:
    """The modules of the library at ``root`` (the repository): paths under ``innergraph/``, and ``innergraph_pickle``."""
    found = sorted(p.relative_to(root / "innergraph").as_posix() for p in (root / "innergraph").rglob("*.py"))
    found += sorted(p.relative_to(root).as_posix() for p in (root / "innergraph_pickle").rglob("*.py"))
    return [m for m in found if "__pycache__" not in m]


def unassigned(root: Path) -> list[str]:
    """Modules in neither a patch nor `LIBRARY_ONLY`, and names assigned twice."""
    counts: dict[str, int] = {}
    for spec in SERIES:
        for module in spec.modules:
            counts[module] = counts.get(module, 0) + 1
    problems = [f"{m} is assigned to {n} patches" for m, n in counts.items() if n > 1]
    problems += [f"{m} is both in a patch and LIBRARY_ONLY" for m in counts if m in LIBRARY_ONLY]
    modules = library_modules(root)
    problems += [m for m in modules if m not in ASSIGNED and m not in LIBRARY_ONLY]
    problems += [f"{m} is assigned but does not exist" for m in ASSIGNED if m not in modules]
    if tuple(spec.slug for spec in SERIES) != SERIES_ORDER:
        problems.append(f"SERIES is {[spec.slug for spec in SERIES]}, innergraph.startup.shipped.SERIES_ORDER {list(SERIES_ORDER)}")
    return problems
