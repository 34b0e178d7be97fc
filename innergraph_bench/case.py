"""A benchmark case: a graph built for each variant, its input values and how it is compiled."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["VARIANTS", "Case", "Graph"]

#: The two variants every case is compiled with.
VARIANTS = ("vanilla", "innergraph")

Graph = tuple[list[Any], list[Any]]


@dataclass(frozen=True)
class Case:
    """One benchmark case.

    Attributes
    ----------
    id
        Short unique name (``"1669-d2"``, ``"seqs-K16"``...), used to select cases.
    group
        The issue's case number, ``"demo"`` or ``"jax"``.
    title
        One line saying what is measured.
    build
        ``build(variant) -> (inputs, outputs)``: a fresh graph each call.
    values
        The input values, in the order of ``inputs``.
    linker
        PyTensor linker the case is compiled with.
    rtol
        Relative tolerance when comparing the variants' results.
    compile
        ``compile(inputs, outputs, mode) -> function``, when the case is compiled
        otherwise than by ``pytensor.function`` (PyMC's cases: ``pymc.pytensorf.compile``).
    """

    id: str
    group: str
    title: str
    build: Callable[[str], Graph]
    values: Sequence[Any]
    linker: str = "numba"
    rtol: float = 1e-10
    params: dict[str, Any] = field(default_factory=dict)
    compile: Callable[[list[Any], list[Any], Any], Any] | None = None
