"""Numba code of ``switch.py``'s `IndexSwitch`, imported on the first Numba link (``load_on_link``).

One jitted function per node: the index clipped, then every branch's body rendered
inline (`numba_body_code`, ``code.render``) under its own ``if``, so exactly one runs.
"""

from __future__ import annotations

import importlib

from innergraph.consumer import body_value, numba_body_code, numba_function, register_numba

IndexSwitch = importlib.import_module(__name__.replace("switch_numba", "switch")).IndexSwitch


def _branch_lines(code, b, args):
    """Branch ``b``'s body over ``args``, ending in a ``return`` of its outputs (a tuple when several)."""
    rendering = code.render(f"b{b}_", args)
    outputs = rendering.outputs
    result = outputs[0] if len(outputs) == 1 else "(" + ", ".join(outputs) + ",)"
    return [*rendering.lines, f"return {result}"], rendering.env


def numba_source(op, node):
    """``(params, lines, env, keys)`` of the node's function: clip the index, then one branch per ``if``."""
    n = op.n_branches
    args = [f"a{i}" for i in range(len(node.inputs) - n - 1)]
    names = [f"f{b}" for b in range(n)] + ["index", *args]
    lines, env, keys = [f"i = min(max(index.item(), 0), {n - 1})"], {}, []
    for b in range(n):
        code = numba_body_code(body_value(node.inputs[b]))
        body_lines, body_env = _branch_lines(code, b, args[: op.n_operands] + op.captured_of(args, b))
        lines.append(f"{'if' if b == 0 else 'elif' if b < n - 1 else 'else'}{f' i == {b}' if b < n - 1 else ''}:")
        lines += ["    " + line for line in body_lines]
        env.update(body_env)
        keys.append(code.key)
    return names, lines, env, keys


@register_numba(IndexSwitch)
def numba_funcify_switch(op, node=None, **kwargs):
    names, lines, env, keys = numba_source(op, node)
    return numba_function(f"index_switch{op.n_branches}", names, lines, env, keys)
