"""Import PyMC and innergraph in a given order, then print PyMC's copies of canonicalize.

Usage: ``copies.py ORDER`` with ORDER one of ``vanilla`` (innergraph never imported),
``innergraph-first``, ``pymc-first``, ``innergraph-first-uninstalled`` or
``pymc-first-uninstalled`` (``innergraph.uninstall()`` after both imports), or
``innergraph-first-reinstalled`` (uninstall, then install again). Prints one line per
tracker list of each copy: the copy, the list's key and its rewriters' names in order
(the order in which the copy tries them).
"""

import re
import sys

order = sys.argv[1]
if order.startswith("innergraph-first"):
    import innergraph
    import pymc  # noqa: F401
elif order.startswith("pymc-first"):
    import pymc  # noqa: F401

    import innergraph
else:
    import pymc  # noqa: F401
assert ("innergraph" in sys.modules) == (order != "vanilla")
if order.endswith(("-uninstalled", "-reinstalled")):
    innergraph.uninstall()
if order.endswith("-reinstalled"):
    innergraph.install()

from pymc.logprob.rewriting import logprob_rewrites_db  # noqa: E402


def name(rewriter):
    return getattr(rewriter, "name", None) or getattr(rewriter, "__name__", None) or type(rewriter).__name__


for entry in ("pre-canonicalize", "post-canonicalize"):
    (copy,) = logprob_rewrites_db.__db__[entry]
    for i, member in enumerate(copy.data):
        tracker = member.node_tracker
        lists = [("instance", k, v) for k, v in tracker.tracked_instances.items()]
        lists += [("type", k, v) for k, v in tracker.tracked_types.items()]
        lists += [("pattern", p, v) for by in tracker.tracked_pattern_types.values() for p, v in by.items()]
        lists += [("untracked", None, tracker.untracked_rewrites)]
        for kind, key, members in lists:
            if members:
                key = re.sub(r" at 0x[0-9a-f]+", "", str(key))  # function addresses differ between processes
                print(entry, i, kind, key, [name(r) for r in members])
