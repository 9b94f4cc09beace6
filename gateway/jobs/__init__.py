"""Ingest jobs: long uploads run in the background; their state is stored in Milvus."""
