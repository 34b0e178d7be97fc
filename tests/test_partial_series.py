"""``import innergraph`` on a PyTensor carrying only the first patches of the upstream series.

`innergraph.startup.upstream` decides: patches 1-4 are inert (nothing imports ``pytensor.innergraph``),
so innergraph monkey-patches as on a released PyTensor; the last patch makes PyTensor enable its
copy, and the whole series is aliased; a PyTensor enabling a copy that lacks modules (patched from
another version of the series) is refused, naming what is missing. These tests build fake ``pytensor/innergraph`` folders holding the modules of the
first k patches; ``.ci/patched`` (`innergraph_patches.verify`) checks the same on real builds.
"""

import sys

import pytest

from innergraph.startup import upstream
from innergraph_patches.series import SERIES


def _fake_copy(root, level):
    """``root`` holding the modules of the series' first ``level`` patches, as the series ships them."""
    folder = root / "innergraph"
    folder.mkdir()
    (folder / "__init__.py").write_text("")  # patch 1 creates the package
    for spec in SERIES[:level]:
        for module in spec.modules:
            target = folder / upstream.shipped_as(module)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("")
    return str(folder)


@pytest.mark.parametrize("level", range(len(SERIES) + 1))
def test_series_level_counts_the_leading_patches_present(tmp_path, level):
    assert upstream.series_level(_fake_copy(tmp_path, level)) == level


def test_a_module_missing_from_an_earlier_patch_lowers_the_level(tmp_path):
    folder = _fake_copy(tmp_path, len(SERIES))
    (tmp_path / "innergraph" / "core" / "fold.py").unlink()  # patch 1's
    assert upstream.series_level(folder) == 0
    assert upstream.missing_modules(folder) == ["core/fold.py"]


def test_no_copy_is_level_zero():
    assert upstream.missing_modules(None, 1) == [upstream.shipped_as(m) for m in SERIES[0].modules]


@pytest.mark.parametrize("level", range(1, len(SERIES)))
def test_inert_patches_are_monkey_patched_as_a_released_pytensor(tmp_path, monkeypatch, level):
    monkeypatch.setattr(upstream, "_upstream_folder", lambda: _fake_copy(tmp_path, level))
    monkeypatch.delitem(sys.modules, "pytensor.innergraph.rewriting.db", raising=False)
    upstream.refuse_partial_series()  # no error
    monkeypatch.setattr(upstream, "series_level", lambda folder=None: level)
    assert not upstream.patched_pytensor()


def test_a_copy_pytensor_enables_without_the_backends_is_refused_naming_them(tmp_path, monkeypatch):
    """A copy holding everything but the backends, which PyTensor enables (no build of this series does: they come first)."""
    folder = _fake_copy(tmp_path, len(SERIES))
    for module in (tmp_path / "innergraph" / "backends").glob("*.py"):
        module.unlink()
    monkeypatch.setattr(upstream, "_upstream_folder", lambda: folder)
    monkeypatch.setitem(sys.modules, "pytensor.innergraph.rewriting.db", sys.modules[__name__])
    with pytest.raises(ImportError, match=r"carries patches 1-3 of innergraph's 5-patch upstream series.*lacks backends/") as error:
        upstream.refuse_partial_series()
    assert "install PyTensor with the whole series" in str(error.value)


def test_a_copy_pytensor_enabled_is_refused_whatever_it_lacks(tmp_path, monkeypatch):
    """A PyTensor patched from another version of the series (fewer modules) but enabling its copy: no second registration."""
    monkeypatch.setattr(upstream, "_upstream_folder", lambda: _fake_copy(tmp_path, 1))
    monkeypatch.setitem(sys.modules, "pytensor.innergraph.rewriting.db", sys.modules[__name__])
    with pytest.raises(ImportError, match=r"patches 1-1 .* lacks patching/"):
        upstream.refuse_partial_series()


def test_the_whole_series_is_aliased_not_refused(tmp_path, monkeypatch):
    folder = _fake_copy(tmp_path, len(SERIES))
    monkeypatch.setattr(upstream, "_upstream_folder", lambda: folder)
    monkeypatch.setitem(sys.modules, "pytensor.innergraph.rewriting.db", sys.modules[__name__])
    upstream.refuse_partial_series()
    assert upstream.series_level() == len(SERIES) and upstream.patched_pytensor()
