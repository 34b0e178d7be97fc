"""The upstream path in review-sized steps: which pull request carries what, and how large it is.

The series (`innergraph_patches.series`) is five patches, one per layer of the library, of
563 to 5,952 added lines: the right unit to prove that the whole change keeps PyTensor's
tests, the wrong one for a maintainer to review. `STEPS` is the same change cut into pull
requests of at most about `MAX_LINES` changed lines each (tests apart), in the order they
can be merged.

Terms
-----
written step
    A step that exists as a pull request: a patch against the PyTensor sdist in a folder of
    ``patches/`` (``patches/pr-1/``) with its description, in PyTensor's code style and test
    layout, and the same change against PyTensor's ``main`` in its ``main/`` folder. Each
    applies on top of the written steps before it; `innergraph_patches.build` checks that
    they still apply to the sdist, in order.
carried step
    A step that is still library code: the functions of the library it would carry into
    PyTensor (``carries``), rewritten as a direct change of PyTensor's own functions (no hook,
    no delegate), as the written steps are. Its size is the size of that library code.
regrouped step
    A part of the series itself: library modules (``modules``, shipped as
    ``pytensor/innergraph/<path>``) and direct edits of PyTensor's files (``edits``, by the
    record they stand for). The regrouped steps partition the series: every module and
    every edit of `SERIES` is in exactly one of them (`partition_problems`).
alone
    What the step delivers if no later step is ever merged.
a step's own tests
    A regrouped step's tests, written for it in PyTensor's test layout and style (not cut
    out of innergraph's suite, which enables everything): the files under ``patches/<tests>/``
    (``tests``, e.g. ``step-8``), laid over PyTensor's tree at the same paths. They reach
    the step's modules as ``pytensor.innergraph.<path>`` with innergraph not enabled, as
    PyTensor's users would before the last step (`innergraph_patches.step_tests` runs them).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from innergraph.startup.shipped import SHIPPED
from innergraph_patches.series import ASSIGNED, EDITS, Delegate, Edit
from innergraph_patches.shipping import REPOSITORY, library_source, rewrite_imports

__all__ = [
    "MAX_LINES", "STEPS", "Step", "edit_lines", "import_problems", "import_time_dependencies", "own_test_files", "partition_problems",
    "roadmap_rows", "step_edits", "step_lines", "tested", "written_patch",
]

#: The most changed lines (library code or PyTensor's code, tests apart) a step may have.
MAX_LINES = 2000


@dataclass(frozen=True)
class Step:
    """One pull request of the upstream path (module docstring)."""

    title: str
    alone: str
    pr: str = ""  # a written step: its folder under patches/
    carries: tuple[str, ...] = ()  # a carried step: "module.py" or "module.py:function" of the library
    modules: tuple[str, ...] = ()  # a regrouped step: library modules (paths under innergraph/)
    edits: tuple[str, ...] = ()  # a regrouped step: its edits, by the record they replace (or their file)
    tested: str = ""  # a written step: PyTensor's tests run on it (a regrouped step's come from its series patch)
    tests: str = ""  # a regrouped step: the folder of patches/ holding its own tests (module docstring)
    upstream: str = ""  # a regrouped step: PyTensor's own tests run on its tree (`step-tests --upstream`), as recorded


#: The eighth step's own tests (`own_test_files`), run on steps 1-8 by `innergraph_patches.step_tests`.
_STEP_8_TESTED = "its own tests (tests/innergraph/test_core.py, 11 tests) pass on steps 1-8 from source and on the last step's tree"

#: The ninth step's own tests.
_STEP_9_TESTED = "its own tests (tests/innergraph/test_fold.py, 8 tests) pass on steps 1-9 from source and on the last step's tree"

#: The tenth step's own tests.
_STEP_10_TESTED = "its own tests (tests/innergraph/test_protocol.py, 6 tests) pass on steps 1-10 from source and on the last step's tree"

#: The eleventh step's own tests.
_STEP_11_TESTED = (
    "its own tests (tests/innergraph/test_hooks.py, 5 tests) pass on steps 1-11 from source and on the last step's tree, "
    "where the two that check that hooks are inert are skipped"
)

#: The twelfth step's own tests.
_STEP_12_TESTED = "its own tests (tests/innergraph/test_consumers.py, 3 tests) pass on steps 1-12 from source and on the last step's tree"

#: The thirteenth step's own tests.
_STEP_13_TESTED = "its own tests (tests/innergraph/test_loops.py, 3 tests) pass on steps 1-13 from source and on the last step's tree"

#: The fourteenth step's own tests.
_STEP_14_TESTED = "its own tests (tests/innergraph/test_rewrites.py, 3 tests) pass on steps 1-14 from source and on the last step's tree"

#: The fifteenth step's own tests.
_STEP_15_TESTED = "its own tests (tests/innergraph/test_numba_units.py, 6 tests) pass on steps 1-15 from source and on the last step's tree"

#: The sixteenth step's own tests.
_STEP_16_TESTED = "its own tests (tests/innergraph/test_numba_consumers.py, 3 tests) pass on steps 1-16 from source and on the last step's tree"

#: The seventeenth step's own tests.
_STEP_17_TESTED = "its own tests (tests/innergraph/test_jax_consumers.py, 4 tests) pass on steps 1-17 from source and on the last step's tree"

#: The eighteenth step's own tests.
_STEP_18_TESTED = "its own tests (tests/innergraph/test_loop_work.py, 2 tests) pass on steps 1-18 from source and on the last step's tree"

#: The nineteenth step's own tests.
_STEP_19_TESTED = "its own tests (tests/innergraph/test_whole_loops.py, 2 tests) pass on steps 1-19 from source and on the last step's tree"

#: The last step's own tests.
_STEP_20_TESTED = "its own tests (tests/innergraph/test_enabled.py, 2 tests) and every other step's pass on steps 1-20 from source"

#: PyTensor's default test list on the tree of the hooks' edits (`innergraph_patches.step_tests`, ``--upstream 11``).
_STEP_11_UPSTREAM = (
    "PyTensor's default list (27 files of the rel-3.3.0 tree, 585 ids) on steps 1-11 from source: "
    "every id vanilla's outcome (`step-tests --upstream 11`)"
)

#: PyTensor's default test list on the tree of the Numba conversions and the linker's edits (``--upstream 16``).
_STEP_16_UPSTREAM = (
    "PyTensor's default list (27 files of the rel-3.3.0 tree, 585 ids) on steps 1-16 from source: "
    "every id vanilla's outcome (`step-tests --upstream 16`)"
)

#: PyTensor's default test list on the trees of steps 1-15 and 1-17 (``--upstream 15 17``, 2026-12-03).
_STEP_15_UPSTREAM = (
    "PyTensor's default list (27 files of the rel-3.3.0 tree, 585 ids) on steps 1-15 from source: "
    "every id vanilla's outcome (`step-tests --upstream 15`)"
)
_STEP_17_UPSTREAM = (
    "PyTensor's default list (27 files of the rel-3.3.0 tree, 585 ids) on steps 1-17 from source: "
    "every id vanilla's outcome (`step-tests --upstream 17`)"
)

#: PyTensor's default test list on the last step's tree (`innergraph_patches.step_tests`, ``--upstream 20``).
_STEP_20_UPSTREAM = (
    "PyTensor's default list (27 files of the rel-3.3.0 tree, 585 ids) on steps 1-20 from source, innergraph enabled: "
    "every id vanilla's outcome, judged against the plain sdist run the same way (`step-tests --upstream 20`)"
)

#: The hooks' modules that import later steps' (the rewrite database, the consumers, the lifting
#: rules): they come with the last step, the other hooks' modules with the hooks' edits.
_LAST_HOOKS = ("patching/__init__.py", "patching/gradient.py", "patching/linker.py")

_INERT = "nothing by itself: inert until the last step enables innergraph"

#: PyTensor's tests on the written Numba steps, which were run together (each step's text names the others).
_NUMBA_STEPS_TESTED = (
    "12 files of the rel-3.3.0 tree, 675 test ids, each vanilla's outcome; with steps 1-3, the other 18 files of tests/link/numba/ (902 ids): one difference, found and fixed (test_solve_continuous_lyapunov: an inner function registered by a numba compile was called by reference from the tests' Python mode)"
)

#: PyTensor's tests on the fifth written step.
_MESSAGES_TESTED = (
    "with steps 1-4: tests/link/numba/test_shape.py, tests/link/numba/test_tensor_basic.py and tests/tensor/test_shape.py "
    "of the rel-3.3.0 tree, 105 test ids, each vanilla's outcome (all pass in both)"
)

#: PyTensor's tests on the sixth written step.
_ROWS_TESTED = (
    "with steps 1-5: tests/link/numba/test_scan.py, the 12 files of tests/scan/ in run.sh's list and tests/compile/test_builders.py "
    "of the rel-3.3.0 tree, 348 test ids, each file's outcome vanilla's"
)

#: PyTensor's tests on the seventh written step.
_SLICES_TESTED = (
    "with steps 1-6: tests/link/numba/test_tensor_basic.py, tests/link/numba/test_sort.py and tests/tensor/test_sort.py "
    "of the rel-3.3.0 tree, 117 test ids, each vanilla's outcome, and tests/tensor/test_basic.py -k alloc, 76 passed as in vanilla"
)

STEPS: tuple[Step, ...] = (
    Step(
        "Numba: cache each converted function itself, not a wrapper of it",
        "every Op whose conversion is a numba dispatcher is compiled and optimised once instead of twice on a cold cache",
        pr="pr-1",
        tested="with step 2: " + _NUMBA_STEPS_TESTED,
    ),
    Step(
        "Numba: compile a large Scan or OpFromGraph inner function once, call it by reference",
        "an inner graph of 8 nodes or more is optimised once, not again inside the loop's and the outer function's LLVM modules, and cached under its own key, shared by every model",
        pr="pr-2",
        tested="with step 1: " + _NUMBA_STEPS_TESTED,
    ),
    Step(
        "Numba: remove an unreadable cache entry and compile again, with one warning",
        "a truncated or overwritten entry under the compile directory no longer fails the compilation",
        pr="pr-3",
        tested="with steps 1-2: " + _NUMBA_STEPS_TESTED,
    ),
    Step(
        "Numba: floating-point constants of a graph with a loop passed as arguments of the compiled function",
        "a model with a loop whose edit changes only numbers (a prior's scale, observed data of the same shape) reuses every compiled function from the cache",
        pr="pr-4",
        tested=(
            "with steps 1-3: 29 files of the rel-3.3.0 tree (27 of tests/link/numba/, tests/compile/test_builders.py, tests/scan/test_basic.py), "
            "1,168 test ids, each vanilla's outcome; not run: linalg/test_decomposition.py, linalg/test_solvers.py (no Scan)"
        ),
    ),
    Step(
        "Numba: format SpecifyShape's and Split's error messages in Python",
        "a cold start of any function with a SpecifyShape (every PyMC model has some) or a Split compiles no string formatting: "
        "seconds less in every process on a cold cache",
        pr="pr-5",
        tested=_MESSAGES_TESTED,
    ),
    Step(
        "Numba: store a Scan's array rows with a loop, not a slice assignment",
        "a Scan over an array state no longer compiles and links Numba's string formatting for its row stores: a "
        "forward filter's cold start 7.35 -> 5.45 s (94 -> 63 Numba functions); with a gradient, Alloc's and CAReduce's "
        "slice assignments still compile it (a follow-up)",
        pr="pr-6",
        tested=_ROWS_TESTED,
    ),
    Step(
        "Numba: fill Alloc of a 0d value by its element and sort vectors without slice assignments",
        "a cold start with an Alloc of a 0d value or a vector sort or argsort compiles no string formatting for a shape "
        "check: a function of the three 27.7 -> 7.6 s (136 -> 27 Numba functions); pymc-extras' SARIMAX, in innergraph's "
        "library form, 0.62x -> 0.50x of vanilla's cold start",
        pr="pr-7",
        tested=_SLICES_TESTED,
    ),
    Step(
        "innergraph: bodies as function-typed variables (types, params, the InnerGraph Op, canonical encoding)",
        _INERT,
        modules=(
            "core/__init__.py",
            "core/types.py",
            "core/graph.py",
            "core/errors.py",
            "core/compat.py",
            "core/canonical.py",
            "core/build.py",
            "core/instantiate.py",
            "innergraph_pickle/__init__.py",
        ),
        tests="step-8",
        tested=_STEP_8_TESTED,
    ),
    Step(
        "innergraph: folding bodies into constants before linking; the records of the hooks",
        _INERT,
        modules=("core/fold.py", "core/hidden_folds.py", "core/interning.py", "core/hooks.py", "core/dispatch.py", "core/collector.py"),
        tests="step-9",
        tested=_STEP_9_TESTED,
    ),
    Step(
        "innergraph: the consumer protocol (slots, step semantics, plans, lift and lower)",
        _INERT,
        modules=(
            "protocol/__init__.py",
            "protocol/slots.py",
            "protocol/semantics.py",
            "protocol/plans.py",
            "protocol/shapes.py",
            "protocol/signature.py",
            "protocol/runtime.py",
            "protocol/conversion.py",
        ),
        tests="step-10",
        tested=_STEP_10_TESTED,
    ),
    Step(
        "Call innergraph's hooks from the linker, printing, pickling, DebugMode, Scan's gradient and JAX's dispatch",
        "nothing by itself: each hook returns what PyTensor computed until innergraph is enabled",
        modules=tuple(m for m in SHIPPED["innergraph-hooks"] if m not in _LAST_HOOKS),
        tests="step-11",
        tested=_STEP_11_TESTED,
        upstream=_STEP_11_UPSTREAM,
        edits=(
            "Linker.schedule",
            "printing.debugprint",
            "copyreg.dispatch_table[FunctionGraph]",
            "debugmode._find_bad_optimizations",
            "Scan.pullback",
            "sys.meta_path[ImportHook]",
            "FunctionMaker.prepare_fgraph",
        ),
    ),
    Step(
        "innergraph: the in-graph Scan (with its checkpointed gradient), OpFromGraph (Call) and IfElse",
        _INERT,
        modules=("ops/scan.py", "ops/scan_slots.py", "ops/checkpoint.py", "ops/call.py", "ops/ifelse.py", "ops/link_argument.py"),
        tests="step-12",
        tested=_STEP_12_TESTED,
    ),
    Step(
        "innergraph: loops that take bodies (while_loop, do_while, fori_loop, Loop); lifting PyTensor's Scan, IfElse and OpFromGraph",
        _INERT,
        modules=(
            "ops/__init__.py",
            "ops/loop.py",
            "ops/loop_build.py",
            "ops/loop_derivatives.py",
            "loops.py",
            "loops_reverse.py",
            "lifting/__init__.py",
            "lifting/rules.py",
            "lifting/handover.py",
        ),
        tests="step-13",
        tested=_STEP_13_TESTED,
    ),
    Step(
        "innergraph: lifting, lowering and cleaning up bodies (rewrites, not registered)",
        _INERT,
        modules=(
            "rewriting/__init__.py",
            "rewriting/lift.py",
            "rewriting/args.py",
            "rewriting/lift_ofg.py",
            "rewriting/fold_inner_functions.py",
            "rewriting/dce.py",
            "rewriting/remerge.py",
            "rewriting/duplicates.py",
            "rewriting/copies.py",
            "rewriting/stand_in.py",
            "rewriting/debugmode.py",
            "rewriting/tracks.py",
            "rewriting/outlined.py",
            "rewriting/link_arguments.py",
            "rewriting/forward.py",
            "rewriting/inline_args.py",
            "rewriting/ofg_outputs.py",
        ),
        tests="step-14",
        tested=_STEP_14_TESTED,
    ),
    Step(
        "innergraph: Numba units compiled once and called by reference; Numba's messages, literals and slices",
        _INERT,
        modules=(
            "backends/__init__.py",
            "backends/numba_once.py",
            "backends/numba_reference.py",
            "backends/numba_rows.py",
            "backends/numba_gc.py",
            "backends/numba_literals.py",
            "backends/numba_messages.py",
            "backends/numba_slices.py",
            "backends/numba_code.py",
        ),
        edits=("numba_basic.numba_funcify_ensure_cache", "numba_funcify_and_cache_key[Alloc]"),
        tests="step-15",
        tested=_STEP_15_TESTED,
        upstream=_STEP_15_UPSTREAM,
    ),
    Step(
        "innergraph: Numba conversions of the consumers, numbers passed as arguments",
        _INERT,
        modules=("backends/numba.py", "backends/numba_generated.py", "backends/numba_link.py"),
        tests="step-16",
        tested=_STEP_16_TESTED,
        upstream=_STEP_16_UPSTREAM,
        edits=(
            "numba_funcify_and_cache_key[Scan]",
            "numba_funcify_and_cache_key[OpFromGraph]",
            "numba_funcify_and_cache_key[AbstractFunctionGraph]",
            "numba_basic.cache_key_for_constant",
            "NumbaLinker.fgraph_convert",
            "NumbaLinker.create_thunk_inputs",
            "NumbaLinker.jit_compile",
        ),
    ),
    Step(
        "innergraph: JAX conversions of the consumers",
        _INERT,
        modules=tuple(m for m in SHIPPED["innergraph-backends"] if "/jax" in m),
        edits=("jax_funcify[Scan]", "JAXLinker.jit_compile"),
        tests="step-17",
        tested=_STEP_17_TESTED,
        upstream=_STEP_17_UPSTREAM,
    ),
    Step(
        "innergraph: moving work out of loops (push-out, loop-invariant code, carries, untracing)",
        _INERT,
        modules=(
            "rewriting/push_out.py",
            "rewriting/push_out_cost.py",
            "rewriting/licm.py",
            "rewriting/outer.py",
            "rewriting/untrace.py",
            "rewriting/lengths.py",
            "rewriting/carry.py",
            "rewriting/carry_from_zero.py",
            "rewriting/zero_increments.py",
        ),
        tests="step-18",
        tested=_STEP_18_TESTED,
    ),
    Step(
        "innergraph: loops as a whole (batching, outlining, merging, until to while, in place) and the consumer rewrites' fixpoint",
        _INERT,
        modules=(
            "rewriting/scan_inplace.py",
            "rewriting/scan_merge.py",
            "rewriting/batch_loops.py",
            "rewriting/outline_loops.py",
            "rewriting/merge_loops.py",
            "rewriting/until_while.py",
            "rewriting/scan_solve.py",
            "rewriting/fusion.py",
            "rewriting/fresh_carry.py",
            "rewriting/read_back.py",
            "rewriting/share_branch.py",
            "rewriting/simplify.py",
        ),
        tests="step-19",
        tested=_STEP_19_TESTED,
    ),
    Step(
        "Register innergraph's rewrites in optdb, install its hooks and enable it on import; the user API",
        "everything the series does: the representation, its rewrites and the backends switched on for every graph",
        modules=(
            "rewriting/db.py",
            *_LAST_HOOKS,
            "builders.py",
            "consumer.py",
            "stats.py",
            "__init__.py",
        ),
        tests="step-20",
        tested=_STEP_20_TESTED,
        upstream=_STEP_20_UPSTREAM,
        edits=("pytensor/__init__.py",),
    ),
)


def _edit_name(edit: Edit | Delegate) -> str:
    return edit.replaces or edit.file


def edit_lines(edit: Edit | Delegate) -> int:
    """The lines ``edit`` adds to PyTensor's file (a delegate: its new function, `Delegate.source`)."""
    return (edit.text if isinstance(edit, Edit) else edit.source("")).count("\n")


def _module_text(module: str) -> str:
    return rewrite_imports(library_source(module).read_text(), module)


def _carried_lines(reference: str) -> int:
    """The lines of the library code ``module.py`` or ``module.py:name`` (a top-level function or class)."""
    module, _, name = reference.partition(":")
    text = library_source(module).read_text()
    if not name:
        return text.count("\n")
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith((f"def {name}(", f"class {name}(", f"class {name}:"))]
    if len(starts) != 1:
        raise ValueError(f"{reference}: want one top-level definition of {name}, found {len(starts)}")
    end = next((j for j in range(starts[0] + 1, len(lines)) if lines[j] and not lines[j][0].isspace() and not lines[j].startswith(")")), len(lines))
    while end > starts[0] and not lines[end - 1].strip():
        end -= 1
    return end - starts[0]


def written_patch(step: Step) -> Path:
    """The patch file of a written step (one ``0001-*.patch`` in its folder)."""
    found = sorted((REPOSITORY / "patches" / step.pr).glob("[0-9][0-9][0-9][0-9]-*.patch"))
    if len(found) != 1:
        raise FileNotFoundError(f"patches/{step.pr}: want one NNNN-*.patch, found {len(found)}")
    return found[0]


def _patch_lines(patch: Path) -> tuple[int, int]:
    """Changed lines of ``patch``: (outside ``tests/``, under ``tests/``)."""
    code = tests = 0
    current = ""
    for line in patch.read_text().splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else ""
        elif line.startswith(("+", "-")) and not line.startswith(("+++", "---")) and current:
            if current.startswith("tests/"):
                tests += 1
            else:
                code += 1
    return code, tests


def own_test_files(step: Step) -> list[Path]:
    """A regrouped step's own test files (under ``patches/<step.tests>/``, PyTensor's layout below it), sorted; none without."""
    if not step.tests:
        return []
    folder = REPOSITORY / "patches" / step.tests
    files = sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)
    if not any(p.name.startswith("test_") for p in files):
        raise FileNotFoundError(f"patches/{step.tests}: a step's tests folder holds no test_*.py file")
    return files


def step_edits(step: Step) -> list[Edit | Delegate]:
    """The series' edits a regrouped step makes, in its order (`Step.edits` names them)."""
    by_name = {_edit_name(edit): edit for edit in EDITS}
    return [by_name[name] for name in step.edits]


def step_lines(step: Step) -> tuple[int, int]:
    """(changed lines of code, changed lines of tests) of ``step``; a regrouped step's tests are its own test files."""
    if step.pr:
        return _patch_lines(written_patch(step))
    if step.carries:
        return sum(_carried_lines(reference) for reference in step.carries), 0
    code = sum(_module_text(module).count("\n") for module in step.modules)
    tests = sum(path.read_text().count("\n") for path in own_test_files(step))
    return code + sum(edit_lines(edit) for edit in step_edits(step)), tests


def partition_problems() -> list[str]:
    """How the regrouped steps fail to partition the series' modules and edits (empty: they do)."""
    problems: list[str] = []
    for kind, everything, picked in (
        ("module", set(ASSIGNED), [m for step in STEPS for m in step.modules]),
        ("edit", {_edit_name(edit) for edit in EDITS}, [e for step in STEPS for e in step.edits]),
    ):
        problems += [f"{kind} {name} is in {picked.count(name)} steps" for name in sorted(set(picked)) if picked.count(name) > 1]
        problems += [f"{kind} {name} is in no step" for name in sorted(everything - set(picked))]
        problems += [f"{kind} {name} is not in the series" for name in sorted(set(picked) - everything)]
    return problems


def _module_path(name: str) -> str | None:
    """The series module (a path under ``innergraph/``) that the dotted ``name`` is, or None."""
    if name == "innergraph_pickle":
        return "innergraph_pickle/__init__.py"
    if not name.startswith("innergraph."):
        return None
    relative = name.removeprefix("innergraph.").replace(".", "/")
    return next((path for path in (f"{relative}.py", f"{relative}/__init__.py") if path in ASSIGNED), None)


def import_time_dependencies(module: str) -> set[str]:
    """The series modules ``module`` imports when it is imported (its module-level imports, within ``if``/``try``/``with`` too).

    ``from innergraph.rewriting import db`` depends on ``rewriting/db.py``; on the package's
    ``__init__`` only for a name that is no module of it (a step tree holds a stub ``__init__``
    for a package whose own comes later, and Python needs no more to import a submodule).
    """
    found: set[str] = set()
    pending = list(ast.parse(library_source(module).read_text()).body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            pending += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            pending += [statement for handler in getattr(node, "handlers", []) for statement in handler.body]
        elif isinstance(node, ast.Import):
            found |= {path for alias in node.names if (path := _module_path(alias.name))}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (path := _module_path(node.module)):
            if not path.endswith("__init__.py"):
                found.add(path)
                continue
            for alias in node.names:
                found.add(_module_path(f"{node.module}.{alias.name}") or path)
    found.discard(module)
    return found


def import_problems(steps: tuple[Step, ...] | None = None) -> list[str]:
    """Modules of a regrouped step that import, when imported, a module of a later step (empty: every step tree imports).

    Each step has to leave PyTensor working *and* its own modules importable: a pull request
    whose new module fails to import cannot be merged before the one that brings what it needs.
    """
    chosen = STEPS if steps is None else steps
    step_of = {module: number for number, step in enumerate(chosen, 1) for module in step.modules}
    problems = []
    for module, number in step_of.items():
        for needed in sorted(import_time_dependencies(module)):
            if step_of.get(needed, 0) > number:
                problems.append(f"step {number}'s {module} imports {needed}, which step {step_of[needed]} brings")
    return sorted(problems)


def tested(step: Step) -> str:
    """What PyTensor's tests say of ``step``: its own runs if written, else those of the series patches its modules are in."""
    if step.pr or step.carries:
        return step.tested or "not run yet"
    patches = sorted({ASSIGNED[module] + 1 for module in step.modules})
    series = f"in series patch {', '.join(map(str, patches))}, which CI tests patch by patch"
    parts = [step.tested] if step.tests else []
    if step in STEPS:
        number = STEPS.index(step) + 1
        state = "enables innergraph" if number == len(STEPS) else "is inert"
        parts.append(f"on steps 1-{number} every module imports and `import pytensor` {state} (`step-tests`)")
    upstream = step.upstream or f"PyTensor's own tests not run as a step: {series}"
    return "; ".join([*parts, upstream])


def roadmap_rows() -> list[str]:
    """The roadmap table of ``patches/README.md``: step, kind, lines, what it delivers alone, PyTensor's tests on it."""
    rows = [
        "| step | pull request | kind | lines (tests) | what it delivers alone | PyTensor's tests on it |",
        "|---:|---|---|---:|---|---|",
    ]
    for number, step in enumerate(STEPS, 1):
        code, tests = step_lines(step)
        kind = f"written: `patches/{step.pr}/`" if step.pr else "carried: " + ", ".join(f"`{c}`" for c in step.carries) if step.carries else "regrouped from the series"
        rows.append(f"| {number} | {step.title} | {kind} | {code}{f' (+{tests})' if tests else ''} | {step.alone} | {tested(step)} |")
    return rows
