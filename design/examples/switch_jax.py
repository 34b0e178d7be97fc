"""JAX code of ``switch.py``'s `IndexSwitch`, imported on the first JAX link (``load_on_link``).

``lax.switch`` over each branch's body function (`jax_body`), the index clipped,
each branch's outputs cast to the node's dtypes (``lax.switch`` needs equal types).
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
from pytensor.link.jax.dispatch import jax_funcify

from innergraph.consumer import body_value, jax_body

IndexSwitch = importlib.import_module(__name__.replace("switch_jax", "switch")).IndexSwitch


@jax_funcify.register(IndexSwitch)
def jax_funcify_switch(op, node=None, **kwargs):
    n, dtypes = op.n_branches, [o.dtype for o in node.outputs]

    def branch(b):
        fn = jax_body(body_value(node.inputs[b]))

        def run(*args):
            outs = fn(*args[: op.n_operands], *op.captured_of(args, b))
            return tuple(jnp.asarray(o, dtype=d) for o, d in zip(outs, dtypes))

        return run

    branches = [branch(b) for b in range(n)]

    def index_switch(*inputs):
        outs = jax.lax.switch(jnp.clip(inputs[n], 0, n - 1), branches, *inputs[n + 1 :])
        return outs[0] if len(outs) == 1 else outs

    return index_switch
