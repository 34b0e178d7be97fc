"""innergraph's own code raises no warning on import or in a plain compile (issue 49).

Python hides a DeprecationWarning raised outside ``__main__``, so these run fresh
interpreters with ``-W error::DeprecationWarning`` (any DeprecationWarning is an
error): ``import innergraph``, and the README's example (a scan, its second
derivative, compiled with and without innergraph). PyTensor 3.3 moved ``IfElse`` and
``ifelse`` from ``pytensor.ifelse`` (now a deprecated alias) to ``pytensor.conditional.op``.
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).parent.parent


def _run_strict(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900
    )


def test_import_innergraph_raises_no_deprecation_warning():
    run = _run_strict("import innergraph")
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""


def test_the_readme_example_raises_no_deprecation_warning():
    text = (ROOT / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (printed,) = re.findall(r"```python\n.*?```\n\nprints\n\n```text\n(.*?)```", text, flags=re.S)
    run = _run_strict(code)
    assert run.returncode == 0, run.stderr
    assert run.stdout == printed


def test_innergraph_imports_ifelse_from_its_pytensor_3_3_home():
    """The deprecated alias is imported nowhere in the library (the check above sees only what runs)."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "innergraph").rglob("*.py"))
        if re.search(r"^\s*from pytensor\.ifelse import|^\s*import pytensor\.ifelse", path.read_text(), flags=re.M)
    ]
    assert offenders == []
