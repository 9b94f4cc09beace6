"""Retrieval: hits, retrievers, fusion. Never imports strawberry or starlette."""
