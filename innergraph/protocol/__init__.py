"""Layer 2, the consumer protocol: how a consumer declares itself and runs its bodies.

A consumer declares slots and their meanings (`slots`) and, optionally, step semantics
(`semantics`); `signature` reads any consumer node as slots and rebuilds it, which is
all the generic rewrites need; `plans` applies the semantics to one node for the code
generators; `shapes` gives a consumer its default ``infer_shape`` from its slots;
`runtime` runs bodies in Python; `conversion` is the lift / lower engine whose rule
tables the consumers fill. Each consumer registers
itself here (`slots.register_consumer`, `conversion.LIFTERS`): this layer imports no
consumer.
"""

from innergraph.protocol import shapes  # noqa: F401  gives every registered consumer its default infer_shape (slots.ON_REGISTER)
