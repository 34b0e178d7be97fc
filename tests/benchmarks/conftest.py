"""Benchmark plumbing: each benchmark tags its ``variant``; the summary prints ratios.

Every case is measured for vanilla PyTensor and for innergraph in the same run;
``pytest tests/benchmarks --benchmark-enable`` measures, and the summary prints
``innergraph / vanilla`` (fastest rounds, as `innergraph_bench.bench` does) per group, and for the cases of
``test_cases.py`` (tagged with ``case`` and ``metric``) the same ratio table as
``python -m innergraph bench``. In the ordinary test run benchmarks are disabled
(run once, as smoke tests) and nothing is printed.
"""

from collections import defaultdict

from innergraph_bench.bench import CaseResult, Measurement, ratio_table
from innergraph_bench.cases import CASES

_FIELDS = {"compile": "compile_s", "first": "first_s", "steady": "steady_s"}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    session = getattr(config, "_benchmarksession", None)
    if session is None or session.disabled or not session.benchmarks:
        return
    fastest: defaultdict[str, dict] = defaultdict(dict)
    per_case: defaultdict[str, defaultdict[str, dict]] = defaultdict(lambda: defaultdict(dict))  # case -> variant -> field -> value
    for bench in session.benchmarks:
        if bench.stats is None:
            continue
        variant = bench.extra_info.get("variant", bench.name)
        fastest[bench.group][variant] = bench.stats.min
        if "case" in bench.extra_info:
            figures = per_case[bench.extra_info["case"]][variant]
            figures[_FIELDS[bench.extra_info["metric"]]] = bench.stats.min
            if "stats" in bench.extra_info:
                figures["stats"] = bench.extra_info["stats"]
    terminalreporter.section("innergraph / vanilla (fastest-round time ratios)")
    for group, by_variant in sorted(fastest.items()):
        base = by_variant.get("vanilla")
        if not base:
            continue
        ratios = ", ".join(f"{v}: {t / base:.3f}" for v, t in sorted(by_variant.items()) if v != "vanilla")
        terminalreporter.write_line(f"{group:<32} {ratios}")
    results = _case_results(per_case)
    if results:
        terminalreporter.section("innergraph / vanilla per case")
        for line in ratio_table(results):
            terminalreporter.write_line(line)


def _case_results(per_case):
    results = []
    for case in CASES:
        variants = per_case.get(case.id, {})
        try:
            measured = {v: Measurement(**variants[v]) for v in ("vanilla", "innergraph")}
        except (KeyError, TypeError):  # not every metric of both variants was run (-k selection)
            continue
        results.append(CaseResult(case, measured["vanilla"], measured["innergraph"]))
    return results
