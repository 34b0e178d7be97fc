"""Layer 4, lift and lower: PyTensor's own control-flow Ops to the in-graph consumers and back.

`rules` holds innergraph's rules for Scan, OpFromGraph and IfElse (registered in the
engine of `innergraph.protocol.conversion`); `handover` gives a linker that cannot run
a consumer PyTensor's own Ops instead.
"""
