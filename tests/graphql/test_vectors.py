"""Clients that bring their own vectors: upsert chunks with vectors, search by a query vector."""

import numpy as np
import pytest

UPSERT = """
mutation($docs: [DocumentInput!]!) {
  upsertDocuments(namespace: "support", collection: "tickets", documents: $docs) {
    chunks chunksWritten chunksUnchanged chunkIds
  }
}
"""
SEARCH = """
query($input: SearchInput!) {
  search(input: $input) {
    hits { chunk { sourceId chunkId } content score provenance { tenant mode } parent { sourceId } }
    trace { warnings stages { name detail } }
  }
}
"""
DELETE = 'mutation($id: String!) { deleteSource(namespace: "support", collection: "tickets", sourceId: $id) { chunksDeleted } }'


def unit(seed: int, dim: int = 384) -> list[float]:
    vector = np.random.default_rng(seed).standard_normal(dim)
    return (vector / np.linalg.norm(vector)).tolist()


def vector_doc(source_id: str, seed: int) -> dict:
    return {"sourceId": source_id, "title": "Flux valve manual", "metadata": {"status": "open"},
            "chunks": [{"text": "Rotate the flux valve a quarter turn.", "vector": unit(seed)},
                       {"text": "Then reset the pressure panel.", "vector": unit(seed + 1)}]}


@pytest.fixture
def cleanup(gateway):
    written: list[tuple[str, str]] = []
    yield written
    for key, source_id in written:
        gateway.post(DELETE, {"id": source_id}, key=key)


def test_upserted_vectors_are_found_by_a_query_vector_and_resent_ones_write_nothing(gateway, cleanup):
    cleanup.append(("acme-writer", "VEC-1"))
    first = gateway.data(UPSERT, {"docs": [vector_doc("VEC-1", 100)]}, key="acme-writer")["upsertDocuments"]
    assert (first["chunksWritten"], first["chunkIds"]) == (2, ["support/tickets/VEC-1/0", "support/tickets/VEC-1/1"])
    again = gateway.data(UPSERT, {"docs": [vector_doc("VEC-1", 100)]}, key="acme-writer")["upsertDocuments"]
    assert (again["chunksWritten"], again["chunksUnchanged"], again["chunkIds"]) == (0, 2, [])

    found = gateway.data(SEARCH, {"input": {"vector": unit(101), "collection": "tickets"}})["search"]
    top = found["hits"][0]
    assert (top["chunk"]["sourceId"], top["chunk"]["chunkId"]) == ("VEC-1", "1")
    assert top["content"] == "Then reset the pressure panel." and top["score"] == pytest.approx(1.0, abs=1e-4)
    assert top["provenance"]["mode"] == "DENSE" and top["parent"]["sourceId"] == "VEC-1"
    [retrieve] = [s for s in found["trace"]["stages"] if s["name"].startswith("retrieve:")]
    assert retrieve["detail"]["queryModality"] == "vector"
    assert retrieve["detail"]["denseIndex"] == "FLAT"  # a small collection under index.dense: auto is searched exactly

    # With words beside the vector, BM25 still reads the words: a sparse search by text finds the chunk.
    sparse = gateway.data(SEARCH, {"input": {"query": "flux valve quarter turn", "vector": unit(101),
                                             "collection": "tickets", "mode": "SPARSE"}})["search"]
    assert (sparse["hits"][0]["chunk"]["sourceId"], sparse["hits"][0]["chunk"]["chunkId"]) == ("VEC-1", "0")
    [retrieve] = [s for s in sparse["trace"]["stages"] if s["name"].startswith("retrieve:")]
    assert "denseIndex" not in retrieve["detail"]
    # Hybrid: the dense list is the vector's (chunk 1), the sparse list the words' (chunk 0).
    hybrid = gateway.data(SEARCH, {"input": {"query": "flux valve quarter turn", "vector": unit(101),
                                             "collection": "tickets", "mode": "HYBRID"}})["search"]
    assert {("VEC-1", "0"), ("VEC-1", "1")} <= {(h["chunk"]["sourceId"], h["chunk"]["chunkId"])
                                                for h in hybrid["hits"][:2]}

    # A changed vector is a change; the unchanged chunk is not rewritten.
    moved = vector_doc("VEC-1", 100)
    moved["chunks"][1]["vector"] = unit(500)
    changed = gateway.data(UPSERT, {"docs": [moved]}, key="acme-writer")["upsertDocuments"]
    assert (changed["chunksWritten"], changed["chunkIds"]) == (1, ["support/tickets/VEC-1/1"])


def test_context_renders_a_search_by_vector_alone(gateway, cleanup):
    cleanup.append(("acme-writer", "VEC-CTX"))
    gateway.data(UPSERT, {"docs": [vector_doc("VEC-CTX", 900)]}, key="acme-writer")
    context = gateway.data('query($v: [Float!]) { context(input: {vector: $v, collection: "tickets"}, maxChars: 400) '
                           '{ text } }', {"v": unit(900)})["context"]["text"]
    assert context.startswith("## Retrieved Context (query vector)\n- [VEC-CTX/0]")


def test_a_federated_search_by_vector_alone_uses_it_in_every_collection(gateway, cleanup):
    cleanup.append(("acme-writer", "VEC-FED"))
    gateway.data(UPSERT, {"docs": [vector_doc("VEC-FED", 300)]}, key="acme-writer")
    found = gateway.data(SEARCH, {"input": {"vector": unit(300), "federated": True}})["search"]
    assert (found["hits"][0]["chunk"]["sourceId"], found["hits"][0]["chunk"]["chunkId"]) == ("VEC-FED", "0")


def test_collections_say_what_size_their_vectors_have(gateway):
    collections = gateway.data("{ collections { namespace name dimension } }")["collections"]
    assert {(c["namespace"], c["name"], c["dimension"]) for c in collections} >= {("support", "tickets", 384),
                                                                                 ("support", "docs", 384)}


def test_wrong_sizes_are_refused_naming_both_sizes(gateway):
    docs = [{"sourceId": "VEC-OK", "text": "fine", "vector": unit(1)},
            {"sourceId": "VEC-BAD", "chunks": [{"text": "a", "vector": unit(2)}, {"text": "b", "vector": unit(3, 768)}]}]
    error = gateway.error(UPSERT, {"docs": docs}, key="acme-writer")
    assert error["extensions"]["code"] == "INVALID_INPUT"
    assert error["message"] == ("vector of documents[1].chunks[1] has 768 dimensions; "
                                "collection support/tickets stores 384")
    # Nothing of the request was written (checked before anything is).
    assert gateway.error('{ source(namespace: "support", sourceId: "VEC-OK") { sourceId } }')["extensions"]["code"] \
        == "UNKNOWN_SOURCE"
    error = gateway.error(UPSERT, {"docs": [{"sourceId": "VEC-ONE", "text": "t", "vector": [1.0, 0.0, 0.0]}]},
                          key="acme-writer")
    assert error["message"] == "vector of documents[0].vector has 3 dimensions; collection support/tickets stores 384"
    error = gateway.error(SEARCH, {"input": {"vector": [1.0, 0.0, 0.0], "collection": "tickets"}})
    assert error["extensions"]["code"] == "INVALID_INPUT"
    assert error["message"] == "query vector has 3 dimensions; collection support/tickets stores 384"


def test_what_a_vector_alone_cannot_do_is_a_typed_error(gateway):
    error = gateway.error(SEARCH, {"input": {"vector": unit(1), "collection": "tickets", "mode": "HYBRID"}})
    assert error["extensions"]["code"] == "MODE_NOT_SUPPORTED"
    assert "mode 'hybrid' runs BM25 on the query's text" in error["message"] and "allowed without `query`: dense" \
        in error["message"]
    error = gateway.error(SEARCH, {"input": {"vector": unit(1), "collection": "tickets", "pipeline": "evidence"}})
    assert error["extensions"]["code"] == "INVALID_INPUT"
    assert "pipeline 'evidence' has stages that read the query's text (rerank, compress)" in error["message"]
    error = gateway.error(SEARCH, {"input": {"collection": "tickets"}})
    assert "query is empty; send at least one word, or a `vector`" in error["message"]
    error = gateway.error(SEARCH, {"input": {"vector": [0.0] * 384, "collection": "tickets"}})
    assert error["message"] == "query vector is all zeros, which has no direction to compare by cosine"
    error = gateway.error(UPSERT, {"docs": [{"sourceId": "VEC-X", "text": "t", "chunks": [{"text": "a", "vector": unit(1)}]}]},
                          key="acme-writer")
    assert "documents[0] has chunks and text" in error["message"]
    error = gateway.error(UPSERT, {"docs": [{"sourceId": "VEC-X"}]}, key="acme-writer")
    assert "documents[0] has neither text nor chunks" in error["message"]


def test_a_vector_search_never_crosses_the_tenant_boundary(gateway, cleanup):
    cleanup.append(("globex-writer", "VEC-GLX"))
    gateway.data(UPSERT, {"docs": [vector_doc("VEC-GLX", 700)]}, key="globex-writer")
    theirs = gateway.data(SEARCH, {"input": {"vector": unit(700), "collection": "tickets"}}, key="globex-reader")
    assert theirs["search"]["hits"][0]["chunk"]["sourceId"] == "VEC-GLX"
    # acme searches the same names with globex's exact vector: globex's rows are not among its hits.
    for query in ({"vector": unit(700), "collection": "tickets"}, {"vector": unit(700), "federated": True},
                  {"vector": unit(700), "query": "flux valve", "collection": "tickets", "mode": "HYBRID"}):
        hits = gateway.data(SEARCH, {"input": {**query, "limit": 50}})["search"]["hits"]
        assert hits and all(h["chunk"]["sourceId"] != "VEC-GLX" and h["provenance"]["tenant"] == "acme" for h in hits)
