"""The cold-start benchmark's parent alternates the variants model by model.

`innergraph_bench.cold` starts one child process per variant and measurement; drift on
the machine (another job starting, the CPU warming) touches whichever variant runs
later, so the parent puts vanilla first for one model and innergraph first for the
next. Checked with the child replaced by a recorder: no process is started.
"""

from typing import Any

from innergraph_bench import cold


def _recording(monkeypatch) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []

    def child(args: list[str], compiledir: str, python: str) -> dict[str, Any]:
        calls.append(tuple(args))
        return {"function": 1.0, "first_call": 1.0, "cold_start": 2.0, "total": 2.0}

    monkeypatch.setattr(cold, "_child", child)
    return calls


def test_cold_starts_alternate_which_variant_runs_first(monkeypatch):
    calls = _recording(monkeypatch)
    results = cold.cold_starts(["a", "b", "c"], log=lambda line: None)
    firsts = [args[2] for args in calls if args[0] == "where"]
    assert firsts == ["vanilla", "innergraph", "innergraph", "vanilla", "vanilla", "innergraph"]
    # each variant's three runs share its compile directory, in the order cold, edited, rerun
    assert [args[0] for args in calls[:3]] == ["where", "nuts", "nuts"] and calls[1][-1] == "--edited"
    assert [sorted(r.runs) for r in results] == [["innergraph", "vanilla"]] * 3


def test_sampling_runs_alternate_over_models_and_samplers(monkeypatch):
    calls = _recording(monkeypatch)
    results = cold.sampling_runs(["a", "b"], log=lambda line: None)
    variants = [(args[1], args[4], args[2]) for args in calls[::2]]  # the cold run of each pair
    assert variants == [
        ("a", "pymc", "vanilla"), ("a", "pymc", "innergraph"),
        ("a", "nutpie", "innergraph"), ("a", "nutpie", "vanilla"),
        ("b", "pymc", "vanilla"), ("b", "pymc", "innergraph"),
        ("b", "nutpie", "innergraph"), ("b", "nutpie", "vanilla"),
    ]
    assert [r.case for r in results] == ["a / pymc", "a / nutpie", "b / pymc", "b / nutpie"]


def test_a_childs_peak_memory_is_its_own_not_its_parents():
    # Linux keeps ru_maxrss across execve: a small child of a large parent reports the parent's size
    import subprocess
    import sys

    ballast = bytearray(400 * 2**20)  # the parent holds 400 MB, touched
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])
    child = subprocess.run(
        [sys.executable, "-c", "from innergraph_bench.cold import peak_mb; print(peak_mb())"],
        capture_output=True, text=True, check=True,
    )
    assert float(child.stdout) < 200, child.stdout
    del ballast


def test_peak_memory_reads_the_high_water_mark(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmPeak:\t 9000000 kB\nVmHWM:\t  512000 kB\nVmRSS:\t  100 kB\n")
    assert cold.peak_mb(str(status)) == 500.0
    assert cold.peak_mb(str(tmp_path / "missing")) > 0  # ru_maxrss where there is no /proc


def test_the_children_import_this_repositorys_packages_from_bytecode(tmp_path, monkeypatch):
    # The README installs innergraph editable, which leaves no bytecode; under PYTHONDONTWRITEBYTECODE
    # (set on this project's machines) each child would compile innergraph's sources again (about 0.2 s),
    # which an installed package never does and vanilla never does for PyTensor.
    import subprocess
    import sys

    package = tmp_path / "some_package"
    package.mkdir()
    (package / "__init__.py").write_text("X = 1\n")
    (package / "part.py").write_text("Y = 2\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(cold, "_compiled", {})
    assert cold.compile_bytecode(sys.executable, ["some_package", "no_such_package"]) == [str(package)]
    assert sorted(p.name.split(".")[0] for p in (package / "__pycache__").iterdir()) == ["__init__", "part"]
    child = subprocess.run(
        [sys.executable, "-v", "-c", "import some_package.part"],
        env=cold.child_env(str(tmp_path / "compiledir"), sys.executable), capture_output=True, text=True, check=True,
    )
    loaded = [line for line in child.stderr.splitlines() if "some_package" in line and line.startswith("# code object from")]
    assert len(loaded) == 2 and all(line.endswith(".pyc'") for line in loaded), loaded


def test_alternating_blocks_alternate_and_tell_the_slower_function():
    from innergraph_bench.by_reference_steady import alternating_blocks

    order: list[str] = []

    def work(name: str, n: int):
        def fn():
            order.append(name)
            sum(range(n))
        return fn

    medians = alternating_blocks({"fast": work("fast", 200), "slow": work("slow", 2000)}, blocks=4, budget=0.005)
    assert medians["slow"] > 3 * medians["fast"] > 0
    # the calibration calls of the first, then blocks fast, slow | slow, fast | fast, slow | slow, fast
    runs = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    assert runs == ["fast", "slow", "fast", "slow", "fast"], runs
