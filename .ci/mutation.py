"""CI step (issue 47 item 2): planted faults as a habit -- a slice of mutation testing.

One module of `MODULES`, chosen by the commit's hash (the same module on every machine,
printed), is mutated by cosmic-ray (https://cosmic-ray.readthedocs.io; why cosmic-ray:
design/testing.md, "Planted faults as a habit"), a deterministic sample of its mutants (also
from the commit's hash) each run against the module's test files. A mutant the tests do not
kill fails the run unless `.ci/mutation-equivalent.toml` names it as equivalent (same
behaviour), with why. cosmic-ray edits the source in place, so everything runs in a copy of
the commit (``git archive``), never in the checkout.

    python .ci/mutation.py [--module PATH] [--sample N | --all] [--keep DIR]
    python .ci/mutation.py --module PATH --tests "PYTEST ARGS" [--tests ...] --all

The second form is a module's trial run before it joins `MODULES`: its own test runs, each
a quoted pytest argument list.

Knobs: MUTATION_MODULE (a path of `MODULES`), MUTATION_SAMPLE (mutants; 0 = all),
MUTATION_SEED (instead of the commit's hash), MUTATION_TIMEOUT (seconds a mutant's test run
may take before cosmic-ray kills it and counts the mutant killed; default 600: a mutant that
makes a pass's ``while`` endless then costs less). Exit 1 on a new survivor, 2 on a setup error.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import random
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".venv" / "bin" / "python"

#: module -> the pytest argument lists (one pytest each, in turn, -x) whose tests cover it, and
#: the mutants CI samples per run. Only modules with a full run recorded in design/testing.md
#: (every survivor killed or named equivalent) belong here: a survivor fails CI.
def _one_file(tests: str, *args: str) -> dict[str, object]:
    """A module covered by one pytest run of one test file (``args``: e.g. ``-k`` and its filter), 12 of its mutants sampled per run."""
    return {"tests": [[tests, *args]], "sample": 12}


MODULES: dict[str, dict[str, object]] = {
    "innergraph/backends/jax_generated.py": _one_file("tests/test_jax_generated_direct.py"),  # about 6 s a mutant at load 2-4 (jax.jit)
    "innergraph/backends/numba_generated.py": _one_file("tests/test_numba_generated_direct.py"),  # about 3.7 s a mutant at load 2-4
    "innergraph/core/canonical.py": {
        "tests": [["tests/test_graph.py"], ["tests/test_pickle.py", "-k", "constant or pickl or load"]],
        "sample": 12,  # about 15 s a mutant on one core: 3 minutes
    },
    "innergraph/core/instantiate.py": _one_file("tests/test_instantiate_direct.py"),  # about 4.5 s a mutant at load 3-4
    "innergraph/ops/scan.py": _one_file("tests/test_scan_layout_direct.py"),  # about 3 s a mutant at load 2-3
    "innergraph/patching/rewritten_key.py": _one_file("tests/test_rewritten_key_direct.py"),  # about 3.6 s a mutant at load 2-3
    "innergraph/patching/rewritten_store.py": _one_file("tests/test_rewritten_store_direct.py"),  # about 2.7 s a mutant at load 2-3
    "innergraph/protocol/signature.py": _one_file("tests/test_signature_direct.py"),  # about 3.1 s a mutant at load 3
    "innergraph/rewriting/args.py": _one_file("tests/test_args_direct.py"),  # about 2.7 s a mutant at load 1-2
    "innergraph/rewriting/batch_loops.py": {  # about 5 s a mutant on one core; a named one also runs
        # the second file's 300 loops (about 15 s): they alone kill `len(read) is k` (design/testing.md)
        "tests": [["tests/test_batch_loops_direct.py"], ["tests/test_batch_loops.py", "-k", "beyond_the_small_ints"]],
        "sample": 12,
    },
    "innergraph/rewriting/carry.py": _one_file("tests/test_carry_direct.py"),  # about 3.5 s a mutant at load 1-3
    "innergraph/rewriting/carry_from_zero.py": _one_file("tests/test_carry_from_zero.py"),  # about 3.5 s a killed mutant, 7 s a survivor
    "innergraph/rewriting/copies.py": _one_file("tests/test_copies_direct.py"),  # about 3-4.5 s a mutant at load 3
    "innergraph/rewriting/db.py": _one_file("tests/test_db_direct.py"),  # about 3.5-5.5 s a mutant at load 3
    "innergraph/rewriting/dce.py": {
        "tests": [["tests/test_rewrites.py", "-k", "dead or keeps or pruned or live_slots"], ["tests/test_opfromgraph.py", "-k", "dead"]],
        "sample": 12,
    },
    "innergraph/rewriting/debugmode.py": _one_file("tests/test_debugmode_direct.py"),  # about 4.5 s a mutant at load 3 (a walk made endless ends at its test's 10 s alarm)
    "innergraph/rewriting/duplicates.py": _one_file(  # about 9.5 s a mutant at load 3-4
        "tests/test_reverse.py", "-k", "duplicate or same_update_and_initial or symmetrically or other_initial_values or one_body_output or one_branch_only"
    ),
    "innergraph/rewriting/fold_inner_functions.py": _one_file("tests/test_fold_inner_functions.py"),  # about 10 s a mutant on one core
    "innergraph/rewriting/fresh_carry.py": _one_file("tests/test_fresh_carry.py"),  # about 5 s a mutant on one core
    "innergraph/rewriting/forward.py": _one_file(  # about 7.5 s a mutant on one core
        "tests/test_rewrites.py", "-k", "pass_through or return_an_argument or return_a_constant or forwarding or forwarded or passes_rows"
    ),
    "innergraph/rewriting/fusion.py": _one_file("tests/test_fusion_direct.py"),  # about 3 s a mutant at load 2, 4-5 s at load 3-4
    "innergraph/rewriting/inline_args.py": _one_file("tests/test_inline_args.py"),  # about 4 s a mutant on one core
    "innergraph/rewriting/lengths.py": _one_file("tests/test_lengths_direct.py"),  # about 4 s a mutant at load 5-6
    "innergraph/rewriting/licm.py": _one_file("tests/test_rewrites.py", "-k", "invariant or branch_only or hoisting"),  # about 8 s a mutant at load 3-4
    "innergraph/rewriting/lift.py": _one_file("tests/test_lift_direct.py"),  # about 5.5 s a mutant at load 3
    "innergraph/rewriting/lift_ofg.py": _one_file("tests/test_lift_ofg.py"),  # about 3 s a mutant at load 2-3
    "innergraph/rewriting/link_arguments.py": _one_file("tests/test_link_arguments.py"),  # about 7 s a mutant on one core
    "innergraph/rewriting/merge_loops.py": _one_file("tests/test_merge_loops_direct.py"),  # about 2 s a mutant at load 2-3
    "innergraph/rewriting/ofg_outputs.py": _one_file("tests/test_ofg_dead_outputs.py"),  # about 4 s a mutant on one core
    "innergraph/rewriting/outer.py": _one_file("tests/test_outer_direct.py"),  # about 3.4 s a mutant at load 3-4
    "innergraph/rewriting/outline_loops.py": _one_file("tests/test_outline_loops_direct.py"),  # about 14 s a mutant at load 4-6
    "innergraph/rewriting/outlined.py": _one_file("tests/test_outlined_direct.py"),  # about 4-6 s a mutant at load 3
    "innergraph/rewriting/push_out.py": _one_file("tests/test_push_out_direct.py"),  # about 7.4 s a mutant at load 3-4
    "innergraph/rewriting/push_out_cost.py": _one_file("tests/test_push_out_cost.py"),  # about 5 s a mutant on one core
    "innergraph/rewriting/read_back.py": _one_file("tests/test_read_back.py"),  # about 3.5 s a mutant on one core
    "innergraph/rewriting/remerge.py": _one_file("tests/test_remerge.py"),  # about 4 s a mutant on one core
    "innergraph/rewriting/scan_inplace.py": _one_file("tests/test_scan_inplace.py"),  # about 2.5 s a mutant at load 2-3
    "innergraph/rewriting/scan_merge.py": _one_file("tests/test_scan_merge.py", "-k", "not compile"),  # about 2.7 s a mutant at load 4
    "innergraph/rewriting/stand_in.py": _one_file("tests/test_stand_in.py"),  # the swap of the two passes that use it
    "innergraph/rewriting/scan_solve.py": _one_file("tests/test_scan_solve.py"),  # about 6 s a mutant on one core
    "innergraph/rewriting/share_branch.py": _one_file("tests/test_share_branch.py"),  # about 4 s a mutant at load 3-4
    "innergraph/rewriting/simplify.py": _one_file("tests/test_rewrites.py", "-k", "simplif or one_new_body"),  # about 5 s a mutant on one core
    "innergraph/rewriting/tracks.py": _one_file("tests/test_tracks.py"),  # about 3 s a mutant on one core
    "innergraph/rewriting/untrace.py": _one_file(  # about 6 s a mutant on one core
        "tests/test_rewrites.py", "-k", "untracing or last_step or no_trace or initial_value_is_read or one_new_body or their_trace or its_trace"
    ),
    "innergraph/rewriting/until_while.py": _one_file("tests/test_until_while.py"),  # about 7 s a mutant at load 3: under 2 minutes
    "innergraph/rewriting/zero_increments.py": _one_file("tests/test_zero_increments.py"),  # about 8 s a mutant at load 2-3
}


def commit_seed() -> tuple[int, str]:
    if os.environ.get("MUTATION_SEED"):
        return int(os.environ["MUTATION_SEED"]), f"MUTATION_SEED={os.environ['MUTATION_SEED']}"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode == 0:
        return int(head.stdout[:8], 16), f"commit {head.stdout[:12]}"
    day = int(time.strftime("%j", time.gmtime()))
    return day, f"no git: day of the year {day}"


def timeout() -> float:
    """Seconds a mutant's test run may take (MUTATION_TIMEOUT, default 600); cosmic-ray counts a mutant that runs longer killed."""
    seconds = float(os.environ.get("MUTATION_TIMEOUT", "600"))
    if not seconds > 0:
        raise ValueError(f"MUTATION_TIMEOUT must be a positive number of seconds, not {os.environ['MUTATION_TIMEOUT']!r}")
    return seconds


def equivalents() -> dict[str, list[dict[str, str]]]:
    path = ROOT / ".ci" / "mutation-equivalent.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


def mutated_line(diff: str) -> str:
    """The source line a mutant changes, as the diff's first non-blank ``-`` line shows it (stripped).

    Blank ``-`` lines are skipped: cosmic-ray writes a mutated module back without the blank
    lines around what it removed, so removing a decorator diffs as two blank lines, then it.
    """
    for line in diff.splitlines():
        if line.startswith("-") and not line.startswith("---") and line[1:].strip():
            return line[1:].strip()
    return ""


def is_equivalent(module: str, operator: str, diff: str, named: dict[str, list[dict[str, str]]]) -> bool:
    line = mutated_line(diff)
    return any(e["operator"] == operator and e["line"] == line for e in named.get(module, []))


class _NoAnnotations(ast.NodeTransformer):
    """Drops annotations: under ``from __future__ import annotations`` they are never evaluated."""

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AnnAssign:
        node.annotation = ast.Constant(None)
        self.generic_visit(node)
        return node


def only_annotations(source: str, diff: str) -> bool:
    """Whether the mutant ``diff`` of ``source`` changes annotations only (an equivalent mutant
    when the module does ``from __future__ import annotations``: they stay strings)."""
    if "from __future__ import annotations" not in source:
        return False
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "module.py"
        target.write_text(source)
        body = "\n".join(line for line in diff.splitlines() if not line.startswith("--- mutation diff"))
        done = subprocess.run(["patch", "-s", str(target)], input=body + "\n", text=True, capture_output=True)
        if done.returncode != 0:
            return False
        mutated = target.read_text()
    try:
        strip = lambda text: ast.dump(_NoAnnotations().visit(ast.parse(text)))  # noqa: E731
        return strip(source) == strip(mutated)
    except SyntaxError:
        return False


def test_command(copy: Path, tests: list[list[str]]) -> str:
    runs = " && ".join(
        f"{PYTHON} -m pytest -x -q -p no:cacheprovider " + " ".join(_quote(a) for a in args) for args in tests
    )
    return f"sh -c \"cd {copy} && export PYTHONPATH={copy} && {runs}\""


def _quote(arg: str) -> str:
    return f"'{arg}'" if " " in arg else arg


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default=os.environ.get("MUTATION_MODULE"))
    parser.add_argument("--sample", type=int, default=None)
    parser.add_argument("--all", action="store_true", help="every mutant of the module")
    parser.add_argument("--keep", help="keep the copy and the session there")
    parser.add_argument("--tests", action="append", help="a pytest argument list (quoted) for a module not in MODULES; repeat for several runs")
    args = parser.parse_args()
    seed, why = commit_seed()
    modules = sorted(MODULES)
    module = args.module or modules[seed % len(modules)]
    if args.tests:
        spec = {"tests": [shlex.split(run) for run in args.tests], "sample": 0}
    elif module not in MODULES:
        print(f"CI mutation: {module} is not in MODULES ({modules}); a trial run names its --tests")
        return 2
    else:
        spec = MODULES[module]
    sample = 0 if args.all else args.sample if args.sample is not None else int(os.environ.get("MUTATION_SAMPLE", spec["sample"]))  # type: ignore[call-overload]
    print(f"CI mutation: {module} ({why}; {sample or 'all'} mutants)")
    cosmic = ROOT / ".venv" / "bin" / "cosmic-ray"
    if not cosmic.exists():
        subprocess.run([str(PYTHON), "-m", "pip", "install", "-q", "-e", f"{ROOT}[mutation]"], check=True)
    copy = Path(args.keep or tempfile.mkdtemp(prefix="innergraph-mutation-"))
    copy.mkdir(parents=True, exist_ok=True)
    try:
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(copy)], input=archive, check=True)
        config, session = copy / "cosmic-ray.toml", copy / "session.sqlite"
        config.write_text(
            "[cosmic-ray]\n"
            f'module-path = "{module}"\n'
            f"timeout = {timeout()}\n"
            "excluded-modules = []\n"
            f"test-command = '''{test_command(copy, spec['tests'])}'''\n"  # type: ignore[arg-type]
            '[cosmic-ray.distributor]\nname = "local"\n'
        )
        subprocess.run([str(cosmic), "init", str(config), str(session)], cwd=copy, check=True)
        source = (copy / module).read_text()
        print(f"CI mutation: {_drop_annotations(session, source)} mutants inside annotations left out (equivalent, never run)")
        jobs = _sample(session, sample, seed)
        print(f"CI mutation: {jobs} mutants")
        began = time.time()
        subprocess.run([str(cosmic), "exec", str(config), str(session)], cwd=copy, check=True)
        return _judge(session, module, time.time() - began, source)
    finally:
        if not args.keep:
            shutil.rmtree(copy, ignore_errors=True)


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The (row, column) spans of ``source``'s annotations (parameters, returns, annotated names), 1-based rows.

    Empty unless the module does ``from __future__ import annotations``, under which they
    are never evaluated (`only_annotations`). An alias such as ``Index = list[Any]`` is
    evaluated and is not one.
    """
    if "from __future__ import annotations" not in source:
        return []
    spans = []
    for node in ast.walk(ast.parse(source)):
        found = [node.annotation] if isinstance(node, ast.arg | ast.AnnAssign) else []
        found += [node.returns] if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else []
        spans += [((a.lineno, a.col_offset), (a.end_lineno or a.lineno, a.end_col_offset or 0)) for a in found if a is not None]
    return spans


def _drop_annotations(session: Path, source: str) -> int:
    """Delete the session's mutants that lie inside an annotation (`annotation_spans`): their count.

    They are equivalent by rule, and each would cost a whole test run (a third of a module's
    mutants, some modules more); `_judge` still recognises any that slipped through by their diff.
    """
    spans = annotation_spans(source)
    with sqlite3.connect(session) as db:
        inside = [
            job for job, r0, c0, r1, c1 in db.execute("select job_id, start_pos_row, start_pos_col, end_pos_row, end_pos_col from mutation_specs")
            if any(low <= (r0, c0) and (r1, c1) <= high for low, high in spans)
        ]
        _delete(db, inside)
    return len(inside)


def _delete(db: sqlite3.Connection, jobs: list[str]) -> None:
    """Remove ``jobs`` from a cosmic-ray session: their specs and their pending work items."""
    for job in jobs:
        db.execute("delete from mutation_specs where job_id = ?", (job,))
        db.execute("delete from work_items where job_id = ?", (job,))


def _sample(session: Path, sample: int, seed: int) -> int:
    """Keep ``sample`` of the session's mutants (all when 0), chosen by ``seed``: their count."""
    with sqlite3.connect(session) as db:
        ids = sorted(row[0] for row in db.execute("select job_id, module_path, operator_name, occurrence from mutation_specs order by start_pos_row, start_pos_col, operator_name, occurrence"))
        keys = {row[0]: f"{row[1]}:{row[2]}:{row[3]}:{row[4]}:{row[5]}" for row in db.execute(
            "select job_id, operator_name, occurrence, start_pos_row, start_pos_col, definition_name from mutation_specs")}
        if not sample or sample >= len(ids):
            return len(ids)
        ordered = sorted(ids, key=lambda i: hashlib.sha256(keys[i].encode()).hexdigest())  # stable across inits
        kept = set(random.Random(seed).sample(ordered, sample))
        _delete(db, [job for job in ids if job not in kept])
        return sample


def _judge(session: Path, module: str, seconds: float, source: str) -> int:
    named = equivalents()
    with sqlite3.connect(session) as db:
        rows = db.execute(
            "select s.operator_name, s.start_pos_row, r.test_outcome, r.worker_outcome, r.diff from mutation_specs s "
            "join work_results r on r.job_id = s.job_id"
        ).fetchall()
    killed = [r for r in rows if r[2].upper() == "KILLED"]
    survived = [r for r in rows if r[2].upper() == "SURVIVED"]
    other = [r for r in rows if r[2].upper() not in ("KILLED", "SURVIVED")]
    new = [r for r in survived if not is_equivalent(module, r[0], r[4], named) and not only_annotations(source, r[4])]
    print(f"CI mutation: {module}: {len(rows)} mutants, {len(killed)} killed, {len(survived)} survived "
          f"({len(survived) - len(new)} equivalent: annotations only, or named), {len(other)} incompetent/other, {seconds:.0f} s")
    for operator, row, _, _, diff in new:
        print(f"  NEW SURVIVOR line {row} {operator}: {mutated_line(diff)}\n{diff}")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
