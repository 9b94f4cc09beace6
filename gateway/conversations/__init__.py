"""Conversations and agent memory: turns per conversation, follow-up resolution, memory collections.

Everything is stored in Milvus, scoped to the tenant by `MilvusStore._boundary`, so several
gateway processes share it and it survives restarts (docs/conversations.md).
"""
