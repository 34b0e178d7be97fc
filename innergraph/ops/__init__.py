"""Layer 3, the consumers: the in-graph Scan, OpFromGraph (`call`), IfElse and loops.

Each registers itself with the consumer protocol (`innergraph.protocol.slots`) on import.
`checkpoint` is checkpointed reverse mode for Scans; `loop_derivatives` the loops'
pushforward and pullback.
"""
