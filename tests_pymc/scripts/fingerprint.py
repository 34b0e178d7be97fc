"""Import PyMC and innergraph in a given order, then print fingerprints of a model's graphs.

Usage: ``fingerprint.py ORDER MODEL`` with ORDER one of ``innergraph-first``,
``pymc-first``, ``innergraph-first-uninstalled`` (``import innergraph; import pymc;
innergraph.uninstall()``) or ``vanilla`` (innergraph never imported), and MODEL a case
id of `innergraph_bench.pymc_models.MODELS`. Prints three lines, ``<name> <sha256>``:

* ``logp``: the text of ``model.logp()`` (what PyMC's logprob derivation built);
* ``compiled``: the text of the compiled NUTS function's graph, inner graphs included;
* ``value``: the NUTS function's outputs at the case's point (``repr`` of rounded floats).
"""

import hashlib
import sys

order, case_id = sys.argv[1], sys.argv[2]
if order.startswith("innergraph-first"):
    import innergraph
    import pymc  # noqa: F401
elif order == "pymc-first":
    import pymc  # noqa: F401

    import innergraph
else:
    import pymc  # noqa: F401
assert ("innergraph" in sys.modules) == (order != "vanilla")
if order == "innergraph-first-uninstalled":
    innergraph.uninstall()

import numpy as np  # noqa: E402
import pytensor  # noqa: E402
from pytensor.compile.mode import Mode  # noqa: E402

from innergraph_bench.pymc_models import MODELS, nuts_graph  # noqa: E402  (imports no innergraph module)

assert ("innergraph" in sys.modules) == (order != "vanilla"), "loading the models imported innergraph"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


model = MODELS[case_id][1]()
print("logp", digest(pytensor.dprint(model.logp(), file="str", print_type=True)))
(inputs, outputs), point = nuts_graph(model)
from pymc.pytensorf import compile as pymc_compile  # noqa: E402

fn = pymc_compile(inputs, outputs, mode=Mode(linker="numba", optimizer="fast_run"))
print("compiled", digest(pytensor.dprint(fn, file="str", print_type=True)))
print("value", repr([np.round(np.asarray(v), 10).tolist() for v in fn(point)]))
