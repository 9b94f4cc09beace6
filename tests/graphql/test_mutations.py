"""Writers store, mutate and delete in their own tenant only."""

UPSERT = """
mutation($docs: [DocumentInput!]!) {
  upsertDocuments(namespace: "support", collection: "tickets", documents: $docs) {
    sources chunks chunksWritten chunksUnchanged chunksDeleted chunkIds deletedChunkIds
  }
}
"""
FIND = '{ search(input: {query: "teleporter calibration", collection: "tickets", mode: SPARSE}) { hits { chunk { sourceId metadata } content } } }'
DOC = {"sourceId": "NEW-1", "title": "Teleporter calibration", "text": "The teleporter calibration drifted.",
       "metadata": {"status": "open", "priority": "high", "product": "storage", "year": 2026}}


def test_upsert_is_idempotent_then_updates_then_deletes(gateway):
    first = gateway.data(UPSERT, {"docs": [DOC]}, key="acme-writer")["upsertDocuments"]
    assert (first["sources"], first["chunksWritten"]) == (1, 1)
    # Chunk.id of what was written: what a client cache evicts or refetches.
    assert (first["chunkIds"], first["deletedChunkIds"]) == (["support/tickets/NEW-1/0"], [])
    again = gateway.data(UPSERT, {"docs": [DOC]}, key="acme-writer")["upsertDocuments"]
    assert (again["chunksWritten"], again["chunksUnchanged"], again["chunkIds"]) == (0, 1, [])
    assert gateway.data(FIND)["search"]["hits"][0]["chunk"]["sourceId"] == "NEW-1"
    changed = {**DOC, "text": "The teleporter calibration was fixed by the admin."}
    assert gateway.data(UPSERT, {"docs": [changed]}, key="acme-admin")["upsertDocuments"]["chunksWritten"] == 1
    assert "fixed" in gateway.data(FIND)["search"]["hits"][0]["content"]
    deleted = gateway.data('mutation { deleteSource(namespace: "support", collection: "tickets", sourceId: "NEW-1") { sourceId chunksDeleted chunkIds } }', key="acme-writer")
    assert deleted["deleteSource"] == {"sourceId": "NEW-1", "chunksDeleted": 1, "chunkIds": ["support/tickets/NEW-1/0"]}
    assert all(h["chunk"]["sourceId"] != "NEW-1" for h in gateway.data(FIND)["search"]["hits"])
    error = gateway.error('mutation { deleteSource(namespace: "support", collection: "tickets", sourceId: "NEW-1") { chunksDeleted } }', key="acme-writer")
    assert error["extensions"]["code"] == "UNKNOWN_SOURCE"


def test_writer_cannot_reach_another_tenant(gateway):
    gateway.data(UPSERT, {"docs": [{**DOC, "sourceId": "GLX-ONLY"}]}, key="globex-writer")
    try:
        # acme's writer uses the very same names and source id: it sees and deletes nothing of globex.
        error = gateway.error('mutation { deleteSource(namespace: "support", collection: "tickets", sourceId: "GLX-ONLY") { chunksDeleted } }', key="acme-writer")
        assert error["extensions"]["code"] == "UNKNOWN_SOURCE"
        assert all(h["chunk"]["sourceId"] != "GLX-ONLY" for h in gateway.data(FIND)["search"]["hits"])
        assert gateway.data(FIND, key="globex-reader")["search"]["hits"][0]["chunk"]["sourceId"] == "GLX-ONLY"
    finally:
        gateway.data('mutation { deleteSource(namespace: "support", collection: "tickets", sourceId: "GLX-ONLY") { chunksDeleted } }', key="globex-writer")


def test_bad_documents_are_refused_with_reasons(gateway):
    error = gateway.error(UPSERT, {"docs": [{**DOC, "metadata": [1, 2]}]}, key="acme-writer")
    assert error["extensions"]["code"] == "INVALID_INPUT" and "must be a JSON object" in error["message"]
    error = gateway.error(UPSERT, {"docs": []}, key="acme-writer")
    assert "documents is empty" in error["message"]


def test_a_shorter_text_reports_the_chunks_it_dropped(gateway):
    long_text = " ".join(f"Sentence {i} about the teleporter calibration drift and its many causes." for i in range(120))
    first = gateway.data(UPSERT, {"docs": [{**DOC, "sourceId": "NEW-2", "text": long_text}]},
                         key="acme-writer")["upsertDocuments"]
    try:
        assert len(first["chunkIds"]) == first["chunksWritten"] > 1
        short = gateway.data(UPSERT, {"docs": [{**DOC, "sourceId": "NEW-2"}]}, key="acme-writer")["upsertDocuments"]
        assert short["chunkIds"] == ["support/tickets/NEW-2/0"]
        assert sorted(short["deletedChunkIds"]) == sorted(first["chunkIds"][1:])
    finally:
        gateway.data('mutation { deleteSource(namespace: "support", collection: "tickets", sourceId: "NEW-2") '
                     '{ chunksDeleted } }', key="acme-writer")


DELETE_MANY = """mutation($ids: [String!]!) { deleteSources(namespace: "support", collection: "tickets", sourceIds: $ids) {
  deleted { sourceId chunksDeleted chunkIds } missing } }"""


def test_delete_sources_removes_many_in_one_call_and_lists_the_missing(gateway):
    docs = [{**DOC, "sourceId": f"MANY-{n}", "text": f"The teleporter calibration batch {n} drifted."} for n in range(3)]
    gateway.data(UPSERT, {"docs": docs}, key="acme-writer")
    gateway.data(UPSERT, {"docs": [{**DOC, "sourceId": "MANY-globex"}]}, key="globex-writer")
    try:
        done = gateway.data(DELETE_MANY, {"ids": ["MANY-2", "MANY-0", "never-there", "MANY-0", "MANY-globex"]},
                            key="acme-writer")["deleteSources"]
        assert done["deleted"] == [{"sourceId": s, "chunksDeleted": 1, "chunkIds": [f"support/tickets/{s}/0"]}
                                   for s in ("MANY-2", "MANY-0")]
        assert done["missing"] == ["never-there", "MANY-globex"]  # another tenant's source is not there for acme
        found = {h["chunk"]["sourceId"] for h in gateway.data(FIND, key="acme-reader")["search"]["hits"]}
        assert "MANY-1" in found and not found & {"MANY-0", "MANY-2"}
        assert gateway.data(FIND, key="globex-reader")["search"]["hits"][0]["chunk"]["sourceId"] == "MANY-globex"
        assert gateway.error(DELETE_MANY, {"ids": ["MANY-1"]}, key="acme-reader")["extensions"]["code"] == "FORBIDDEN"
        too_many = gateway.error(DELETE_MANY, {"ids": [f"x{n}" for n in range(501)]}, key="acme-writer")
        assert too_many["extensions"]["code"] == "LIMIT_EXCEEDED" and "at most 500" in too_many["message"]
        assert gateway.error(DELETE_MANY, {"ids": []}, key="acme-writer")["extensions"]["code"] == "INVALID_INPUT"
    finally:
        gateway.data(DELETE_MANY, {"ids": ["MANY-1"]}, key="acme-writer")
        gateway.data(DELETE_MANY, {"ids": ["MANY-globex"]}, key="globex-writer")
