"""Build the series: a scratch git repository of PyTensor's sdist, one commit per patch, format-patch.

The base is PyTensor's released sdist (`PYTENSOR_VERSION`); ``tree`` builds the same
series on another PyTensor source tree instead (``--tree``: e.g. a checkout of PyTensor's
``main``), for a series that applies there (``design/upstream.md``).

The output is deterministic: fixed author and dates (`AUTHOR`, `DATE`), no signature
(``--no-signature``: the git version), zero commit ids in the ``From`` lines, files
written in sorted order. ``patches/README.md`` is generated with the series (its size
table comes from the commits, its roadmap of review-sized steps from `innergraph_patches.steps`;
its prose from ``README.in`` next to the series). `check_series` also applies the written
steps (``patches/pr-N/``) in order to a fresh sdist tree. `step_tree` lays the first K
review-sized steps (`innergraph_patches.steps`) on a fresh sdist tree, with their own tests.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from innergraph_patches.sdist import PYTENSOR_VERSION, extract, sdist_path
from innergraph_patches.series import SERIES, Delegate, Edit, PatchSpec, unassigned
from innergraph_patches.shipping import REPOSITORY, library_source, rewrite_imports
from innergraph_patches.steps import STEPS, own_test_files, roadmap_rows, step_edits, written_patch

__all__ = ["AUTHOR", "DATE", "REPOSITORY", "build_series", "check_series", "rewrite_imports", "step_tree", "written_step_problems"]

AUTHOR = ("innergraph developers", "innergraph@users.noreply.github.com")
DATE = "2026-01-01T00:00:00+00:00"
_UNASSIGNED_HELP = """the upstream series cannot be built: every module of innergraph/ must be in exactly one patch.
Add each module below to one patch's list in innergraph/startup/shipped.py (SHIPPED:
representation, hooks, consumers, backends or rewrites), or to LIBRARY_ONLY in
innergraph_patches/series.py if it is not part of PyTensor's change (start-up checks, test kit):
"""


def _target(module: str) -> str:
    if module == "innergraph_pickle/__init__.py":
        return "pytensor/innergraph/_pickle.py"
    return f"pytensor/innergraph/{module}"


def _apply_edit(tree: Path, edit: Edit | Delegate) -> None:
    path = tree / edit.file
    if not path.is_file():
        raise RuntimeError(f"{edit.file}: no such file in the base tree (the edit for {edit.replaces or edit.name if isinstance(edit, Delegate) else edit.replaces or 'registration'})")
    text = path.read_text()
    if isinstance(edit, Edit):
        anchor = edit.before + edit.after
        count = text.count(anchor)
        if count != 1:
            raise RuntimeError(f"{edit.file}: the anchor of the edit for {edit.replaces or 'registration'} occurs {count} times (want 1):\n{anchor}")
        path.write_text(text.replace(anchor, edit.before + edit.text + edit.after))
        return
    pattern = re.compile(rf"^([ \t]*)def {edit.name}\(", re.M)
    found = pattern.findall(text)
    if len(found) != 1:
        raise RuntimeError(f"{edit.file}: `def {edit.name}(` occurs {len(found)} times (want 1)")
    indent = found[0]
    text = pattern.sub(lambda m: edit.source(indent) + f"{indent}def _{edit.name}_base(", text, count=1)
    path.write_text(text)


def _git(tree: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": AUTHOR[0],
        "GIT_AUTHOR_EMAIL": AUTHOR[1],
        "GIT_COMMITTER_NAME": AUTHOR[0],
        "GIT_COMMITTER_EMAIL": AUTHOR[1],
        "GIT_AUTHOR_DATE": DATE,
        "GIT_COMMITTER_DATE": DATE,
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(tree.parent),  # no user configuration (signing, hooks, diff options)
    }
    result = subprocess.run(["git", *args], cwd=tree, env=env, check=True, capture_output=True, text=True)
    return result.stdout


def _stub_init() -> str:
    return '"""innergraph: control-flow bodies as graph inputs (the package is completed by the series\' later patches)."""\n'


def _lay_modules(tree: Path, modules: tuple[str, ...] | list[str], edits: list[Edit | Delegate]) -> None:
    """Write ``modules`` in their upstream form under ``pytensor/innergraph/`` (the package started if new) and apply ``edits``."""
    if not (tree / "pytensor/innergraph/__init__.py").exists():
        (tree / "pytensor/innergraph").mkdir(parents=True, exist_ok=True)
        (tree / "pytensor/innergraph/__init__.py").write_text(_stub_init())
    for module in sorted(modules):
        target = tree / _target(module)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rewrite_imports(library_source(module).read_text(), module))
    for sub in sorted({Path(_target(m)).parent for m in modules}):
        init = tree / sub / "__init__.py"
        if not init.exists():
            init.write_text('"""Part of pytensor.innergraph."""\n')
    for edit in edits:
        _apply_edit(tree, edit)


def _commit(tree: Path, spec: PatchSpec, index: int) -> None:
    _lay_modules(tree, spec.modules, list(spec.edits))
    _git(tree, "add", "-A", "--force")  # a tree's .gitignore (PyTensor's ignores core/) must not drop files
    _git(tree, "commit", "-q", "--no-verify", "-m", f"{spec.subject}\n\n{spec.message}\n")


def _sizes(tree: Path, count: int) -> list[tuple[int, int, int]]:
    sizes = []
    for i in range(count, 0, -1):
        rows = [line.split("\t") for line in _git(tree, "diff", "--numstat", f"HEAD~{i}", f"HEAD~{i - 1}").splitlines()]
        sizes.append((len(rows), sum(int(r[0]) for r in rows), sum(int(r[1]) for r in rows)))
    return sizes


def _readme(names: list[str], sizes: list[tuple[int, int, int]]) -> str:
    template = (REPOSITORY / "patches" / "README.in").read_text()
    rows = _size_rows(names, sizes)
    edits = ["| PyTensor file | edit | stands for the monkey-patch |", "|---|---|---|"]
    for spec in SERIES:
        for edit in spec.edits:
            what = f"`{edit.name}` delegates (body kept as `_{edit.name}_base`)" if isinstance(edit, Delegate) else "calls a hook" if edit.replaces else "imports pytensor.innergraph"
            edits.append(f"| `{edit.file}` | {what} | {f'`{edit.replaces}`' if edit.replaces else '—'} |")
    banner = "<!-- generated by `python -m innergraph_patches build` from patches/README.in: do not edit -->\n"
    filled = template.replace("{{SIZES}}", "\n".join(rows)).replace("{{EDITS}}", "\n".join(edits)).replace("{{ROADMAP}}", "\n".join(roadmap_rows()))
    return banner + filled.replace("{{VERSION}}", PYTENSOR_VERSION)


def _base(scratch: Path, sdist: Path | None, source: Path | None) -> tuple[Path, str]:
    """The base tree in ``scratch`` and its name: the sdist's, or a copy of the source tree ``source``."""
    if source is None:
        return extract(sdist_path(sdist), scratch), f"PyTensor {PYTENSOR_VERSION} (sdist)"
    if not (source / "pytensor" / "__init__.py").is_file():
        raise SystemExit(f"{source} is not a PyTensor source tree (no pytensor/__init__.py)")
    tree = scratch / "pytensor-tree"
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git"))
    return tree, f"PyTensor source tree {source.name}"


def _size_rows(names: list[str], sizes: list[tuple[int, int, int]]) -> list[str]:
    rows = ["| patch | what | files | + | − |", "|---|---|---:|---:|---:|"]
    for name, spec, (files, added, removed) in zip(names, SERIES, sizes, strict=True):
        rows.append(f"| `{name}` | {spec.subject} | {files} | {added} | {removed} |")
    total = [sum(s[k] for s in sizes) for k in range(3)]
    rows.append(f"| total | | {total[0]} | {total[1]} | {total[2]} |")
    return rows


def _tree_readme(base: str, names: list[str], sizes: list[tuple[int, int, int]]) -> str:
    return (
        f"# innergraph's series on {base}\n\n"
        "Generated by `python -m innergraph_patches build --tree`: the patches of the repository's\n"
        f"`patches/` (built on PyTensor {PYTENSOR_VERSION}'s sdist, whose README explains them), built on this tree.\n\n"
        + "\n".join(_size_rows(names, sizes))
        + "\n"
    )


def _generate(out: Path, sdist: Path | None, source: Path | None = None) -> list[Path]:
    problems = unassigned(REPOSITORY)
    if problems:
        raise SystemExit(_UNASSIGNED_HELP + "\n".join(f"  innergraph/{p}" if p.endswith(".py") and " " not in p else f"  {p}" for p in problems))
    with tempfile.TemporaryDirectory() as scratch:
        tree, name = _base(Path(scratch), sdist, source)
        _git(tree, "init", "-q")
        _git(tree, "add", "-A", "--force")  # a tree's .gitignore (PyTensor's ignores core/) must not drop files
        _git(tree, "commit", "-q", "--no-verify", "-m", name)
        for index, spec in enumerate(SERIES):
            _commit(tree, spec, index)
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("[0-9][0-9][0-9][0-9]-*.patch"):
            old.unlink()
        listed = _git(tree, "format-patch", "-q", "--no-signature", "--zero-commit", "--no-numbered", "-o", str(out), f"HEAD~{len(SERIES)}")
        written = sorted(Path(line) for line in listed.splitlines() if line)
        names = [p.name for p in written] or sorted(p.name for p in out.glob("[0-9][0-9][0-9][0-9]-*.patch"))
        readme = out / "README.md"
        sizes = _sizes(tree, len(SERIES))
        readme.write_text(_readme(names, sizes) if source is None else _tree_readme(name, names, sizes))
        return sorted(out.glob("[0-9][0-9][0-9][0-9]-*.patch")) + [readme]


def build_series(out: Path | None = None, sdist: Path | None = None, tree: Path | None = None) -> list[Path]:
    """Generate the series (and its README) into ``out`` (default: the repository's ``patches/``).

    ``tree``: build on this PyTensor source tree instead of the sdist (an edit whose anchor
    it lacks stops the build, naming the file and the edit).
    """
    return _generate(out or REPOSITORY / "patches", sdist, tree)


def check_series(out: Path | None = None, sdist: Path | None = None) -> list[str]:
    """Differences between the committed series in ``out`` and a fresh build (empty: up to date)."""
    committed = out or REPOSITORY / "patches"
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch) / "patches"
        _generate(fresh, sdist)
        names = sorted({p.name for p in committed.glob("[0-9][0-9][0-9][0-9]-*.patch")} | {p.name for p in fresh.glob("*.patch")}) + ["README.md"]
        problems = []
        for name in names:
            old, new = committed / name, fresh / name
            if not old.exists() or not new.exists():
                problems.append(f"{name}: {'missing from' if not old.exists() else 'not generated, but in'} {committed}")
                continue
            if old.read_text() != new.read_text():
                diff = difflib.unified_diff(old.read_text().splitlines(), new.read_text().splitlines(), f"committed/{name}", f"generated/{name}", lineterm="", n=1)
                problems.append(f"{name} differs:\n" + "\n".join(list(diff)[:40]))
        return problems + written_step_problems(Path(scratch) / "written", sdist)


def written_step_problems(scratch: Path, sdist: Path | None = None) -> list[str]:
    """The written steps (`innergraph_patches.steps`) whose patch does not apply to a fresh sdist tree after the ones before it (empty: all do)."""
    scratch.mkdir(parents=True, exist_ok=True)
    tree = extract(sdist_path(sdist), scratch)
    for step in STEPS:
        if step.pr:
            patch = written_patch(step)
            done = subprocess.run(["git", "apply", str(patch)], cwd=tree, capture_output=True, text=True)
            if done.returncode != 0:
                return [f"patches/{step.pr}/{patch.name} does not apply to PyTensor {PYTENSOR_VERSION}'s sdist after the written steps before it:\n{done.stderr.strip()}"]
    return []


def step_tree(steps: int, into: Path, sdist: Path | None = None) -> Path:
    """PyTensor's sdist extracted into ``into`` with the first ``steps`` steps of `STEPS` laid on it; the tree.

    A written step's patch is applied (``git apply``); a regrouped step's modules are
    written in their upstream form and its edits applied, as the series does; a
    regrouped step's own tests (`own_test_files`) are copied to their paths in the tree.
    PyTensor's repository has ``tests/__init__.py`` and its sdist does not: the tree gets
    an empty one, so that a step's ``tests/innergraph/`` imports as ``tests.innergraph``
    there too. Raises `RuntimeError` naming the step that does not apply.
    """
    if not 1 <= steps <= len(STEPS):
        raise ValueError(f"steps must be 1 to {len(STEPS)}, got {steps}")
    into.mkdir(parents=True, exist_ok=True)
    tree = extract(sdist_path(sdist), into)
    for number, step in enumerate(STEPS[:steps], 1):
        if step.pr:
            done = subprocess.run(["git", "apply", str(written_patch(step))], cwd=tree, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"step {number} (patches/{step.pr}) does not apply after the steps before it:\n{done.stderr.strip()}")
            continue
        try:
            _lay_modules(tree, step.modules, step_edits(step))
        except RuntimeError as error:
            raise RuntimeError(f"step {number} ({step.title}): {error}") from None
        folder = REPOSITORY / "patches" / step.tests
        for path in own_test_files(step):
            target = tree / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    (tree / "tests").mkdir(exist_ok=True)
    (tree / "tests" / "__init__.py").touch()
    return tree
