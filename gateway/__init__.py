"""A GraphQL retrieval gateway with multi-tenant routing over Milvus."""

__version__ = "0.1.0"
