"""Layer 3, the consumers: the in-graph Scan, OpFromGraph (`call`), IfElse and loops.

Each declares itself to the consumer protocol (`innergraph.protocol.slots`) when it
loads: `scan_slots` for `scan`, the others in their own module. `checkpoint` is
checkpointed reverse mode for Scans; `loop_build` builds loop nodes from Python
functions and `loop_derivatives` gives the loops their derivatives. Importing any
module of this package loads them all, so every consumer is declared and every loop
differentiable before the first graph is built.
"""

from innergraph.ops import call, ifelse, loop, loop_derivatives, scan, scan_slots  # noqa: F401  (declarations)
