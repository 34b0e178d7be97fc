import innergraph  # noqa: F401  (installs the patches for every test)
