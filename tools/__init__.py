"""Developer tools for ember (not part of the shipped ``ember`` package)."""
