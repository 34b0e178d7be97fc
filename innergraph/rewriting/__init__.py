"""Rewrites innergraph adds to PyTensor's database; `db` registers them all."""
