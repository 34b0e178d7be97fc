"""Benchmark plumbing: each benchmark tags its ``variant``; the summary prints ratios.

Every case is measured for vanilla PyTensor and for innergraph in the same run;
``pytest tests/benchmarks --benchmark-enable`` measures, and this summary prints
``innergraph / vanilla`` per group. In the ordinary test run benchmarks are
disabled (run once, as smoke tests).
"""

from collections import defaultdict


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    session = getattr(config, "_benchmarksession", None)
    if session is None or session.disabled or not session.benchmarks:
        return
    means = defaultdict(dict)
    for bench in session.benchmarks:
        if bench.stats is None:
            continue
        means[bench.group][bench.extra_info.get("variant", bench.name)] = bench.stats.mean
    terminalreporter.section("innergraph / vanilla (mean time ratios)")
    for group, by_variant in sorted(means.items()):
        base = by_variant.get("vanilla")
        if not base:
            continue
        ratios = ", ".join(f"{v}: {t / base:.3f}" for v, t in sorted(by_variant.items()) if v != "vanilla")
        terminalreporter.write_line(f"{group:<32} {ratios}")
