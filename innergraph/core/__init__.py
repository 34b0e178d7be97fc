"""Layer 1, the body representation: what a body is, knowing no consumer.

Params and the inner-graph node (`graph`), the function type and `Body` (`types`),
closure conversion (`build`), substitution (`instantiate`), the canonical encoding
(`canonical`), folding function variables into constants (`fold`, `hidden_folds`),
one `Body` per final body and process (`interning`); beside them the PyTensor
machinery every layer uses: internals that move between PyTensor versions (`compat`),
the records that patch PyTensor (`hooks`) and which linker compiles (`dispatch`).
Nothing here imports a layer of innergraph above it (only `innergraph.startup`).
"""

from innergraph.core import canonical  # noqa: F401  registers Body's encoding (types.register_encoding)
