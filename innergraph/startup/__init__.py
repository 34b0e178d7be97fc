"""Layer 0, what ``import innergraph`` checks before anything else loads.

`supported` refuses an unsupported PyTensor with one message; `upstream` recognises a
PyTensor built from the upstream series (``patches/``) and aliases ``innergraph`` to
its ``pytensor.innergraph``; `shipped` lists which module each patch of that series
ships. This package imports nothing else of innergraph: everything else may be
aliased, so it must not load before that decision.
"""
