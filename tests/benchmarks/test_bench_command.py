"""``python -m innergraph bench``: the report, the chart, the options (no timing asserted)."""

import pytest

from innergraph_bench.__main__ import main
from innergraph_bench.bench import CaseResult, Measurement, markdown_report, splice, write_chart
from innergraph_bench.cases import CASES, select

pytestmark = pytest.mark.repository_tools  # run once, on the newest PyTensor (pyproject.toml's markers)


def fake_result(case, compile_ratio, nodes=(10, 8)):
    def measurement(compile_s, total):
        stats = {"outer_nodes": total - 2, "hidden_nodes": 2, "total_nodes": total, "bodies": 1,
                 "consumers": {"scan": 2, "ifelse": 0, "call": 0, "loop": 0}, "unused_outputs": 0,
                 "dead_outputs": 0, "unread_buffers": 0}
        return Measurement(compile_s, 0.01, 0.001, stats, [1.0])

    return CaseResult(case, measurement(1.0, nodes[0]), measurement(compile_ratio, nodes[1]))


def test_markdown_report_lists_ratios_and_targets():
    by_id = {c.id: c for c in CASES}
    results = [fake_result(by_id["1669-d2"], 0.5), fake_result(by_id["seqs-K16"], 0.75, nodes=(10, 10))]
    text = markdown_report(results, header="Measured today.")
    assert text.startswith("Measured today.")
    assert "| 1669-d2 | 1 | 0.50 | 1.00 | 1.00 | 10 → 8 (0.80) | 1 → 1 | 0.0e+00 |" in text
    assert "| compile ratio <= 1.0 on every case | 2/2 | - |" in text
    assert "| compile ratio <= 0.25 on case 2 at K = 16 | 0/1 | seqs-K16 (0.75) |" in text
    assert "| strictly fewer total nodes on case 1 | 1/1 | - |" in text
    assert "| seqs-K16 | innergraph | 750 | 10 | 1 | 2 scan | 8 | 2 | 0 | 0 |" in text


def test_splice_replaces_only_the_marked_section():
    doc = "intro\n<!-- bench:begin -->\nold\n<!-- bench:end -->\noutro\n"
    assert splice(doc, "new\n") == "intro\n<!-- bench:begin -->\nnew\n<!-- bench:end -->\noutro\n"
    with pytest.raises(ValueError, match="bench:begin"):
        splice("no markers", "new")


def test_select_by_group_and_id():
    assert [c.id for c in select(["1"])] == ["1669-d2", "1669-d3"]
    assert [c.id for c in select(["seqs-K16", "6"])] == ["seqs-K16", "ifelse", "ifelse-plain"]
    assert [c.id for c in select(["same-*"])] == ["same-5ops", "same-50ops", "same-500ops"]
    with pytest.raises(ValueError, match="no benchmark case matches 'nope'"):
        select(["nope"])


def test_chart_is_a_png(tmp_path):
    results = [fake_result(c, 0.8) for c in CASES[:3]]
    path = write_chart(results, tmp_path / "ratios.png")
    assert path.read_bytes().startswith(b"\x89PNG")


def test_bench_writes_report_chart_and_updates_a_document(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text("# Benchmarks\n<!-- bench:begin -->\n<!-- bench:end -->\n")
    out = tmp_path / "out"
    assert main(["bench", "--quick", "--cases", "seqs-K1", "--out", str(out), "--update", str(doc)]) == 0
    printed = capsys.readouterr().out
    assert "[1/1] seqs-K1" in printed and "compile" in printed
    report = (out / "benchmarks.md").read_text()
    assert "| seqs-K1 | 2 |" in report and "| seqs-K1 | vanilla |" in report and "warm, 1 round(s)" in report
    assert (out / "ratios.png").read_bytes().startswith(b"\x89PNG")
    assert report.strip() in doc.read_text()


def test_bench_without_matplotlib_still_writes_the_report(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # import fails
    assert main(["bench", "--quick", "--cases", "seqs-K1", "--out", str(tmp_path)]) == 0
    assert "no chart written" in capsys.readouterr().out
    assert (tmp_path / "benchmarks.md").exists() and not (tmp_path / "ratios.png").exists()


def test_bench_list_and_bad_options(capsys):
    assert main(["bench", "--list", "--cases", "7"]) == 0
    assert "step-numba" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["bench", "--cases", "nope"])
    assert "no benchmark case matches" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"]])
def test_help_explains_every_option(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    options = ["-k", "--linker", "--repeats", "--show-graphs", "bench"] if argv == ["--help"] else [
        "--out", "--cases", "--list", "--rounds", "--steady-budget", "--quick", "--update", "--no-chart"]
    for option in options:
        assert option in text


def test_the_k_family_is_selected_on_request_and_reported_with_its_slope():
    from innergraph_bench.bench import family_slopes
    from innergraph_bench.cases import FAMILY_CASES

    # the default run holds one member of the family (issue 48: the 0.15x target at K = 16), not the family
    assert [c.id for c in select(None) if c.group == "shared"] == ["shared-50ops-K16"]
    family = select(["shared-50ops-*"])
    assert [c.id for c in family] == ["shared-50ops-K1", "shared-50ops-K4", "shared-50ops-K16", "shared-50ops-K64"]
    assert len(select(["shared"])) == len(FAMILY_CASES) == 12

    def result(case):  # vanilla 100 ms + 50 ms per loop; innergraph 80 ms + 5 ms per loop
        k = case.params["K"]
        out = fake_result(case, 1.0)
        out.vanilla.compile_s, out.innergraph.compile_s = 0.1 + 0.05 * k, 0.08 + 0.005 * k
        return out

    results = [result(c) for c in family]
    slopes = family_slopes(results)[("shared", 50)]["slope"]
    assert slopes["vanilla"] == pytest.approx(0.05) and slopes["innergraph"] == pytest.approx(0.005)
    text = markdown_report(results)
    assert "| shared | 50 | slope | 50 | 5 | 0.10 |  |" in text
    assert "| shared | 50 | 16 | 900 | 160 | 0.18 | 1.88 |" in text
    assert "| compile ratio <= 0.15 on the 50-op shared step at K = 16 | 0/1 | shared-50ops-K16 (0.18) |" in text
