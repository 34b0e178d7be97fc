"""The README's code runs as written."""

import pathlib
import re


def test_readme_example_runs(capsys):
    text = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert "Bodies:" in capsys.readouterr().out
    stats = namespace["innergraph"].graph_stats(namespace["fn"])
    assert stats["bodies"] == 2 and stats["consumers"]["call"] == 2


def test_readme_counts_are_the_codes():
    """The example counts the README states are the ones the suite runs under the default ``ci`` profile (issue 37: claims and counts had drifted)."""
    import sys

    from hypothesis import settings

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import test_alpha_laws
    import test_differential
    import test_reverse_law

    text = " ".join((pathlib.Path(__file__).parent.parent / "README.md").read_text().split())
    ci, thorough = settings.get_profile("ci").max_examples, settings.get_profile("thorough").max_examples
    assert f"alpha-equivalence laws on {ci} random bodies each" in text
    assert f"(law 5, whose bodies compile, on {test_alpha_laws.LAW5_CI_EXAMPLES})" in text
    assert f"reverse-mode law on {test_reverse_law.CI_EXAMPLES} random programs" in text
    assert f"and {test_differential.CI} random user programs per linker" in text
    assert f"raises the laws to {thorough:,} examples and the programs to {sum(test_differential.THOROUGH.values()):,}" in text
