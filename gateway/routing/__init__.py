"""Routing: which of a tenant's collections answer a query, and the searcher that runs it."""
