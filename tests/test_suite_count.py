"""The number of tests the README and ``design/using.md`` state is the number pytest collects (issue 49: 1,234 was stated, 1,246 collected).

``tests/test_docs.py`` checks the per-law example counts; this checks the total, in a
fresh ``pytest --collect-only`` of the default test paths (the README's second command).
"""

import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.repository_tools  # run once, on the newest PyTensor (pyproject.toml's markers)

ROOT = pathlib.Path(__file__).parent.parent


def collected() -> int:
    """How many tests ``python -m pytest`` collects from the repository's root."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    (count,) = re.findall(r"^(\d+) tests? collected", run.stdout, flags=re.M)
    return int(count)


def test_the_readme_and_using_md_state_the_number_of_tests_pytest_collects():
    (in_using,) = re.findall(r"runs ([\d,]+) tests", (ROOT / "design" / "using.md").read_text())
    (in_readme,) = re.findall(r"runs the test suite, ([\d,]+) tests", (ROOT / "README.md").read_text())
    stated = {"design/using.md": int(in_using.replace(",", "")), "README.md": int(in_readme.replace(",", ""))}
    assert stated == dict.fromkeys(stated, collected()), "update the counts: README.md 'Try it', design/using.md 'The test suite'"
