"""Chunks a client cut: parents grouped by index, or packed by size like the chunker's."""

import numpy as np
import pytest

from gateway.errors import InvalidInput
from gateway.ingest.vectors import VectorChunk, chunk_given
from gateway.tenancy.config import ChunkingConfig

V = np.ones(4, dtype=np.float32)


def test_explicit_parents_join_their_chunks_in_order():
    chunks = [VectorChunk("a", V, 0), VectorChunk("b", V, 0), VectorChunk("c", V, 1)]
    cut = chunk_given(chunks, ChunkingConfig(), "document 'x'")
    assert cut.parents == ("a b", "c")
    assert [(c.chunk_id, c.parent_index, c.text) for c in cut.children] == [("0", 0, "a"), ("1", 0, "b"), ("2", 1, "c")]


def test_without_parents_chunks_are_packed_up_to_parent_chars():
    config = ChunkingConfig(child_chars=100, parent_chars=100, child_overlap=0)
    chunks = [VectorChunk("x" * 60, V), VectorChunk("y" * 30, V), VectorChunk("z" * 30, V)]
    cut = chunk_given(chunks, config, "document 'x'")
    assert cut.parents == ("x" * 60 + " " + "y" * 30, "z" * 30)
    assert [c.parent_index for c in cut.children] == [0, 0, 1]


@pytest.mark.parametrize("chunks, reason", [
    ([], "chunks is empty"),
    ([VectorChunk("a", V, 0), VectorChunk("b", V)], "chunk 1 has no parent while others have one"),
    ([VectorChunk("a", V, -1)], "parent of chunk 0 is -1"),
    ([VectorChunk("a", V), VectorChunk("  ", V)], "text of chunk 1 is empty"),
    ([VectorChunk("é" * 40_000, V)], "text of chunk 0 is 80000 bytes; at most 65535"),
])
def test_bad_chunks_are_refused(chunks, reason):
    with pytest.raises(InvalidInput, match=reason):
        chunk_given(chunks, ChunkingConfig(), "document 'x'")
