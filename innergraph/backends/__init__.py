"""Backend implementations of innergraph's consumers (loaded on first use)."""
