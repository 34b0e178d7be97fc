"""The registration checks both generated backends share (`innergraph.backends.numba_generated`, `jax_generated`).

``register_generated(cls, form)`` registers a backend's generated conversion for a
consumer class whose form has step semantics, and keeps a conversion the class already
has. `check_register_generated` asserts that against one backend's dispatcher, on fresh
subclasses of `FreshOp` that no dispatcher knows yet.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pytensor.graph.op import Op

from design.examples.map_rows import MapRows
from innergraph.protocol.slots import FORMS


class FreshOp(Op):
    """An Op class no dispatch knows yet (each check makes its own subclasses)."""

    __props__ = ()

    def make_node(self, *inputs: Any) -> Any:
        raise NotImplementedError

    def perform(self, node: Any, inputs: Any, output_storage: Any) -> None:
        raise NotImplementedError


def check_register_generated(dispatcher: Any, register_generated: Any, generated_conversion: Any) -> None:
    """A form with semantics gets ``generated_conversion``; one without gets nothing; a class's own conversion stays."""
    form = FORMS[MapRows]
    with_semantics = type("_WithSemantics", (FreshOp,), {})
    register_generated(with_semantics, form)
    assert dispatcher.registry.get(with_semantics) is generated_conversion
    without = type("_WithoutSemantics", (FreshOp,), {})
    register_generated(without, dataclasses.replace(form, semantics=None))
    assert without not in dispatcher.registry
    own = type("_OwnConversion", (FreshOp,), {})

    def conversion(op: Any, node: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError

    dispatcher.register(own)(conversion)
    register_generated(own, form)
    assert dispatcher.registry[own] is conversion
