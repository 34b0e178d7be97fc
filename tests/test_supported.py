"""The supported PyTensor range: one ImportError outside it, PyTensor untouched.

The end-to-end test installs PyTensor 2.38.3 (the version PyMC 5.x pins, on which
innergraph's patches used to break every ``pytensor.scan``) with ``pip install
--no-deps --target`` into a temporary directory and runs a script with that directory
first on ``PYTHONPATH``: PyTensor 2.38.3 then imports with this environment's NumPy,
SciPy and Numba, so no second environment is built. Cost: one wheel download (pip's
cache after the first run) and two interpreter starts, ~15 s on a quiet machine.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from innergraph._supported import SUPPORTED, check_pytensor, parse_version

ROOT = Path(__file__).resolve().parents[1]
UNSUPPORTED = "2.38.3"


@pytest.mark.parametrize(
    "text, release",
    [("3.0.7", (3, 0, 7)), ("3.0.7+12.gabcdef", (3, 0, 7)), ("3.1.0rc1", (3, 1, 0)), ("2.38.3", (2, 38, 3)), ("dev", ())],
)
def test_parse_version(text, release):
    assert parse_version(text) == release


@pytest.mark.parametrize("found", ["3.0.7", "3.0.8", "3.0.7+3.g1234567", "3.0.99"])
def test_supported_versions_pass(found):
    check_pytensor(found)


@pytest.mark.parametrize("found", ["3.0.6", "3.1.0", "3.1.0rc1", "2.38.3", "4.0", "dev"])
def test_unsupported_versions_raise_one_message_naming_range_and_version(found):
    with pytest.raises(ImportError, match=re.escape(f"innergraph supports PyTensor >=3.0.7,<3.1; found PyTensor {found}.")):
        check_pytensor(found)


def test_pyproject_pins_the_supported_range():
    pins = re.findall(r'"pytensor([^"]*)"', (ROOT / "pyproject.toml").read_text())
    low, high = (".".join(map(str, r)) for r in SUPPORTED)
    assert pins == [f">={low},<{high}"]


@pytest.fixture(scope="module")
def unsupported_pytensor(tmp_path_factory):
    target = tmp_path_factory.mktemp(f"pytensor-{UNSUPPORTED}")
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), f"pytensor=={UNSUPPORTED}"]
    subprocess.run(command, check=True, timeout=600)
    return target


def test_import_on_unsupported_pytensor_raises_and_leaves_scan_working(unsupported_pytensor):
    env = {**os.environ, "PYTHONPATH": str(unsupported_pytensor)}
    script = Path(__file__).parent / "scripts" / "import_on_unsupported_pytensor.py"
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines())
    assert lines["VERSION"] == UNSUPPORTED
    assert lines["ERROR"] == (
        f"innergraph supports PyTensor >=3.0.7,<3.1; found PyTensor {UNSUPPORTED}. "
        "innergraph was not installed and PyTensor is unchanged."
    )
    assert float(lines["SCAN"]) == 6.0
