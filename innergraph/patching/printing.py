"""Printing patch (filled in below once the plain output is known)."""

from __future__ import annotations

from innergraph.patching import Patch


def patches() -> list[Patch]:
    return []
