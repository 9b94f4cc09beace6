"""Milvus storage: client from URI, chunk schema, safe filter compiler."""
