"""The number of tests ``design/using.md`` states is the number pytest collects (issue 49: it said 1,234 of 1,246).

``tests/test_docs.py`` checks the per-law example counts; this checks the total, in a
fresh ``pytest --collect-only`` of the default test paths (the README's second command).
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).parent.parent


def collected() -> int:
    """How many tests ``python -m pytest`` collects from the repository's root."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    (count,) = re.findall(r"^(\d+) tests? collected", run.stdout, flags=re.M)
    return int(count)


def test_using_md_states_the_number_of_tests_pytest_collects():
    text = (ROOT / "design" / "using.md").read_text()
    (stated,) = re.findall(r"runs ([\d,]+) tests", text)
    assert int(stated.replace(",", "")) == collected(), "update the count in design/using.md, 'The test suite'"
