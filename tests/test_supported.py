"""The supported PyTensor range: one ImportError outside it, PyTensor untouched.

The end-to-end test runs a script in a fresh interpreter in which the installed PyTensor
reports an unsupported version (3.0.7: the range innergraph declared before PyTensor 3.3;
2.38.3: the version PyMC 5.x pins, on which innergraph's patches once broke every
``pytensor.scan``) and checks that ``import innergraph`` refuses with one message and
patches nothing. The version check reads ``pytensor.__version__`` only, so no other
PyTensor is installed and no network is needed.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from innergraph.startup.supported import SUPPORTED, UNRELEASED_OPT_IN, check_pytensor, parse_version

ROOT = Path(__file__).resolve().parents[1]
RANGE = ">=3.3.6,<3.4"


@pytest.mark.parametrize(
    "text, release",
    [("3.3.8", (3, 3, 8)), ("3.3.8+12.gabcdef", (3, 3, 8)), ("3.4.0rc1", (3, 4, 0)), ("2.38.3", (2, 38, 3)), ("dev", ())],
)
def test_parse_version(text, release):
    assert parse_version(text) == release


def test_the_range_is_the_one_documented():
    assert f">={'.'.join(map(str, SUPPORTED[0]))},<{'.'.join(map(str, SUPPORTED[1]))}" == RANGE


@pytest.mark.parametrize("found", ["3.3.6", "3.3.8", "3.3.8+3.g1234567", "3.3.99"])
def test_supported_versions_pass(found):
    check_pytensor(found)


@pytest.mark.parametrize("found", ["3.3.5", "3.3.0", "3.0.7", "3.4.0", "3.4.0rc1", "2.38.3", "4.0", "dev"])
def test_unsupported_versions_raise_one_message_naming_range_and_version(found):
    with pytest.raises(ImportError, match=re.escape(f"innergraph supports PyTensor {RANGE}; found PyTensor {found}.")):
        check_pytensor(found)


def test_pyproject_pins_the_supported_range():
    pins = re.findall(r'"pytensor([^"]*)"', (ROOT / "pyproject.toml").read_text())
    low, high = (".".join(map(str, r)) for r in SUPPORTED)
    assert pins == [f">={low},<{high}"]


@pytest.mark.parametrize("unsupported", ["3.0.7", "2.38.3"])
def test_import_on_unsupported_pytensor_raises_and_leaves_scan_working(unsupported):
    script = Path(__file__).parent / "scripts" / "import_on_unsupported_pytensor.py"
    run = subprocess.run([sys.executable, str(script), unsupported], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines())
    assert lines["VERSION"] == unsupported
    assert lines["ERROR"] == (
        f"innergraph supports PyTensor {RANGE}; found PyTensor {unsupported}. "
        "innergraph was not installed and PyTensor is unchanged."
    )
    assert float(lines["SCAN"]) == 6.0


@pytest.mark.parametrize("found", ["0+unknown", "0+untagged.3.gb16ffde", "3.3.0+10.gf857e69", "3.3.0.dev4"])
def test_an_unreleased_pytensor_is_refused_naming_the_opt_in_and_accepted_with_it(found, monkeypatch):
    monkeypatch.delenv(UNRELEASED_OPT_IN, raising=False)
    with pytest.raises(ImportError, match=re.escape(f"found PyTensor {found}.") + r".* set " + UNRELEASED_OPT_IN + "=1"):
        check_pytensor(found)
    monkeypatch.setenv(UNRELEASED_OPT_IN, "1")
    check_pytensor(found)


@pytest.mark.parametrize("found", ["3.0.7", "3.3.5", "3.4.0", "3.0.7+12.gabc", "3.4.0+1.gabc", "4.0.dev1"])
def test_the_opt_in_does_not_admit_a_release_or_a_tree_off_the_3_3_line(found, monkeypatch):
    monkeypatch.setenv(UNRELEASED_OPT_IN, "1")
    with pytest.raises(ImportError, match=re.escape(f"found PyTensor {found}. innergraph was not installed and PyTensor is unchanged.") + "$"):
        check_pytensor(found)
