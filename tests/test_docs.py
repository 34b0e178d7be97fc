"""The code the README and ``design/using.md`` show runs as written, and prints what they say."""

import pathlib
import re
import sys
import types
import warnings

import pytest

pytestmark = pytest.mark.repository_tools  # run once, on the newest PyTensor (pyproject.toml's markers)

ROOT = pathlib.Path(__file__).parent.parent


def test_readme_example_prints_what_the_readme_says(capsys):
    """The README's one example, run as written, prints exactly the lines pasted below it."""
    text = (ROOT / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (printed,) = re.findall(r"```python\n.*?```\n\nprints\n\n```text\n(.*?)```", text, flags=re.S)
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out == printed


def test_using_example_runs(capsys):
    text = (ROOT / "design" / "using.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    namespace: dict = {}
    exec(compile(code, "design/using.md", "exec"), namespace)
    assert "Bodies:" in capsys.readouterr().out
    stats = namespace["innergraph"].graph_stats(namespace["fn"])
    assert stats["bodies"] == 2 and stats["consumers"]["call"] == 2


def test_suite_counts_are_the_codes():
    """The example counts ``design/using.md`` states for the suite are the ones it runs under the default ``ci`` profile (issue 37: claims and counts had drifted)."""
    import sys

    from hypothesis import settings

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import test_alpha_laws
    import test_differential
    import test_reverse_law

    text = " ".join((ROOT / "design" / "using.md").read_text().split())
    ci, thorough = settings.get_profile("ci").max_examples, settings.get_profile("thorough").max_examples
    assert f"alpha-equivalence laws on {ci} random bodies each" in text
    assert f"(law 5, whose bodies compile, on {test_alpha_laws.LAW5_CI_EXAMPLES})" in text
    assert f"reverse-mode law on {test_reverse_law.CI_EXAMPLES} random programs" in text
    assert f"and {test_differential.CI} random user programs per linker" in text
    assert f"raises the laws to {thorough:,} examples and the programs to {sum(test_differential.THOROUGH.values()):,}" in text


def test_readme_links_exist():
    """Every repository path the README links to exists (the reference moved to ``design/``)."""
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links and all((ROOT / link).exists() for link in links), [link for link in links if not (ROOT / link).exists()]


DESIGN = ROOT / "design"
PUBLIC = {"innergraph", "innergraph.consumer", "innergraph.testing"}


def _blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DESIGN / page).read_text(), flags=re.S)


def _innergraph_imports(code: str) -> set[str]:
    """The innergraph modules a block imports (``import innergraph.x``, ``from innergraph.x import ...``)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "innergraph"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "innergraph":
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in sys.modules}
    return found


@pytest.mark.parametrize("page", ["contributing.md", "testing.md"])
def test_every_code_block_imports_public_names_only(page):
    blocks = _blocks(page)
    assert blocks, page
    for k, code in enumerate(blocks):
        private = _innergraph_imports(code) - PUBLIC
        assert not private, f"{page}, block {k}: imports {sorted(private)}; public are {sorted(PUBLIC)}"
        names = [n for n in re.findall(r"from innergraph[.\w]* import \(?([^)]*?)\)?\n", code, flags=re.S) for n in n.replace("\n", " ").split(",")]
        assert not [n for n in names if n.strip().startswith("_")], (page, k, names)


@pytest.mark.parametrize("page", ["contributing.md", "testing.md"])
def test_every_code_block_runs(page):
    """Each block runs as written, in a module of its own (importable: the kit pickles the Ops it defines)."""
    for k, code in enumerate(_blocks(page)):
        module = types.ModuleType(f"design_doc_{page.split('.')[0]}_{k}")
        sys.modules[module.__name__] = module
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("error", ".*returned DisconnectedType")
                exec(compile(code, f"design/{page} block {k}", "exec"), module.__dict__)
        finally:
            del sys.modules[module.__name__]
