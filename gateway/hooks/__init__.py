"""Retrieval lifecycle hooks: events built in the search path, delivered off it (docs/agents.md)."""
