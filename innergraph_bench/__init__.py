"""innergraph's demonstration and benchmarks (not the library): ``python -m innergraph [bench]``.

`cases` and `cases_loops` are the benchmark cases, `pymc_models` the PyMC model zoo
(``--suite pymc``), `checkpoint_bench` the memory/time trade of checkpointing, `bench`
the harness measuring each case with innergraph and with innergraph uninstalled in one
process, `__main__` the demonstration and the command line. Install its dependencies
with the ``bench`` extra.
"""
