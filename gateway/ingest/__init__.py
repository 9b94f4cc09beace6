"""The write path: loaders, parent/child chunking, content hashing, idempotent sync."""
