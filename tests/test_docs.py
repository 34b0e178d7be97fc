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
