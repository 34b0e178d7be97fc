"""The demonstration explains itself: every row is described, and the closing summary's numbers are the tables' (issue 49)."""

import re

import pytest

from innergraph_bench import demo
from innergraph_bench.bench import CaseResult, Measurement
from innergraph_bench.cases import ar2, issue_1669, student_t

pytestmark = pytest.mark.repository_tools  # run once, on the newest PyTensor (pyproject.toml's markers)


def _measurement(compile_s, steady_s, scans, calls, outer, hidden, unread, dead=0, result=(1.0,)):
    stats = {"outer_nodes": outer, "hidden_nodes": hidden, "total_nodes": outer + hidden, "bodies": 2,
             "consumers": {"scan": scans, "ifelse": 0, "call": calls, "loop": 0}, "unused_outputs": unread + dead,
             "dead_outputs": dead, "unread_buffers": unread}
    return Measurement(compile_s, 0.01, steady_s, stats, list(result))


RESULTS = [
    CaseResult(issue_1669(2), _measurement(1.5, 20e-6, 4, 0, 23, 4, 1), _measurement(1.4, 16e-6, 3, 0, 19, 4, 0, result=(1.0 + 3e-12,))),
    CaseResult(ar2(), _measurement(2.0, 400e-6, 2, 0, 40, 30, 0, dead=1), _measurement(1.2, 20e-6, 1, 0, 35, 20, 0)),
    CaseResult(student_t(4), _measurement(3.0, 100e-6, 0, 4, 20, 60, 0), _measurement(1.0, 60e-6, 0, 4, 18, 15, 0)),
]


def _cells(table: str, row: str) -> list[str]:
    """The vanilla, innergraph and ratio cells of a row, cut at the table's own column widths."""
    header, *lines = table.splitlines()
    width = (len(header) - 28) // 2
    (line,) = [line for line in lines if line.startswith(row)]
    return [line[20 : 20 + width].strip(), line[20 + width : 20 + 2 * width].strip(), line[20 + 2 * width :].strip()]


def test_every_row_is_explained_once_and_the_terms_are_defined():
    intro = demo.introduction()
    words = " ".join(intro.split())
    assert "the ratio innergraph / vanilla: below 1 means innergraph is smaller or faster" in words
    table = demo.side_by_side(RESULTS[0])
    for name, meaning, _ in demo.ROWS:
        assert table.count(f"\n{name}") == 1 and f"  {name:<18} {meaning}" in intro
    for term in ("consumers", "hidden nodes", "distinct bodies", "unread buffers", "dead outputs"):
        assert re.search(rf"^  {term}\s+\w", intro, flags=re.M), term


def test_the_summary_numbers_are_the_tables_numbers():
    tables = [demo.side_by_side(r) for r in RESULTS]
    loops = {0: 0, 1: 0}
    nodes = {0: 0, 1: 0}
    unused = {0: 0, 1: 0}
    steady, compile_ = [], []
    for table in tables:
        for side in (0, 1):
            loops[side] += sum(int(n) for n in re.findall(r"(\d+) scan", _cells(table, "consumers")[side]))
            nodes[side] += int(_cells(table, "outer nodes")[side]) + int(_cells(table, "hidden nodes")[side])
            unused[side] += int(_cells(table, "unread buffers")[side]) + int(_cells(table, "dead outputs")[side])
        steady.append(float(_cells(table, "steady call [us]")[2]))
        compile_.append(float(_cells(table, "compile time [ms]")[2]))
    text = demo.summary(RESULTS)
    figures = re.fullmatch(
        r"In short: over these 3 tables innergraph compiled to (\d+) loops where vanilla needed (\d+), (\d+) nodes where "
        r"vanilla had (\d+) \(outer \+ hidden\), and (\d+) unused outputs of loops and calls \(dead outputs \+ unread buffers\) where "
        r"vanilla had (\d+); its steady calls took ([\d.]+)-([\d.]+) times vanilla's time and its compilations "
        r"([\d.]+)-([\d.]+) times, with results equal to within ([\d.e+-]+)\.",
        text,
    )
    assert figures, text
    got = figures.groups()
    assert [int(g) for g in got[:6]] == [loops[1], loops[0], nodes[1], nodes[0], unused[1], unused[0]] == [4, 6, 111, 177, 0, 2]
    assert [float(g) for g in got[6:10]] == [min(steady), max(steady), min(compile_), max(compile_)]
    assert float(got[10]) == pytest.approx(float(tables[0].splitlines()[-1].split()[-1]), rel=0.05)


def test_the_bodies_are_printed_only_with_show_graphs(monkeypatch, capsys):
    monkeypatch.setattr(demo, "measure_case", lambda case, **kwargs: next(r for r in RESULTS if r.case.id == case.id))
    monkeypatch.setattr(demo, "demo_cases", lambda k, linker: [r.case for r in RESULTS])
    monkeypatch.setattr(demo, "bodies", lambda case: f"BODIES OF {case.id}")
    demo.run()
    plain = capsys.readouterr().out
    assert "BODIES OF" not in plain and "--show-graphs" in plain and demo.summary(RESULTS) in plain
    assert plain.count("\n== ") == 3
    demo.run(show_graphs=True)
    assert capsys.readouterr().out.count("BODIES OF") == 3


def test_the_demonstration_shows_three_graphs_in_four_tables():
    """The README says three graphs: #1669 (2nd and 3rd derivative, a table each), AR(2) and Student-t."""
    assert [c.id for c in demo.demo_cases(8, "numba")] == ["1669-d2", "1669-d3", "ar2", "student-t-K8"]
