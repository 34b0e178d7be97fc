"""``import innergraph`` on a PyTensor of an unsupported version must raise one ImportError
and leave PyTensor untouched, and ``pytensor.scan`` must still work.

``python import_on_unsupported_pytensor.py VERSION``: the installed PyTensor reports
``VERSION`` as its version (no second PyTensor is installed: the check reads
``pytensor.__version__``, and no network is needed). Prints ``VERSION <version>``,
``ERROR <message>`` and ``SCAN <value>``; any failed check is an AssertionError
(exit code 1).
"""

import sys

import numpy as np
import pytensor

pytensor.__version__ = sys.argv[1]
import pytensor.tensor as pt
from pytensor.compile.mode import optdb
from pytensor.link.basic import Linker

print("VERSION", pytensor.__version__)
schedule, rewrites = vars(Linker)["schedule"], set(optdb._names)
try:
    import innergraph  # noqa: F401
except ImportError as error:
    print("ERROR", error)
else:
    raise AssertionError("import innergraph succeeded on an unsupported PyTensor")
assert vars(Linker)["schedule"] is schedule, "Linker.schedule was patched"
assert set(optdb._names) == rewrites, f"rewrites registered: {set(optdb._names) - rewrites}"
assert not [m for m in sys.modules if m.startswith("innergraph")], "innergraph modules stayed imported"

x = pt.dvector("x")
ys = pytensor.scan(lambda v, acc: acc + v, sequences=[x], outputs_info=[pt.zeros(())], return_updates=False)
print("SCAN", pytensor.function([x], ys[-1], mode="FAST_COMPILE")(np.arange(4.0)))
