"""Developer tools that are not part of the ember package."""
