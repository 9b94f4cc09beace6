"""Image collections over GraphQL: seeded from png/jpg, searched with `image:`, refused across modalities."""

import base64
import hashlib

import pytest

from gateway.settings import Settings
from tests.embedding.images import blue_square, encoded, photo_like, red_logo_on_white, red_square
from tests.serving import serve

KEY = "studio-reader-key"
TENANT = f"""
id: studio
api_keys:
  - {{sha256: "{hashlib.sha256(KEY.encode()).hexdigest()}", role: reader}}
namespaces:
  media:
    collections:
      photos: {{trust_tier: first-party, modality: [image], image_encoder: colour-layout, limit: 3}}
      notes: {{trust_tier: first-party, mode: hybrid}}
router:
  default: federated
seed:
  - {{namespace: media, collection: photos, paths: [images]}}
  - {{namespace: media, collection: notes, paths: [notes]}}
"""
SEARCH = """query($q: String!, $c: String, $image: String, $federated: Boolean! = false) {
  search(input: {query: $q, collection: $c, image: $image, federated: $federated}) {
    hits { content score chunk { sourceId modality sourcePath } } trace { stages { name detail } } } }"""


def flat(hits: list[dict]) -> list[dict]:
    """A hit's own fields and its chunk's, side by side."""
    return [{**h["chunk"], **{k: v for k, v in h.items() if k != "chunk"}} for h in hits]


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    directory = tmp_path_factory.mktemp("studio")
    tenants = directory / "tenants"
    (tenants / "images").mkdir(parents=True)
    (tenants / "notes").mkdir()
    (tenants / "studio.yaml").write_text(TENANT)
    (tenants / "images" / "red-square.png").write_bytes(encoded(red_square()))
    (tenants / "images" / "red-square.png.txt").write_text("A red square")
    (tenants / "images" / "blue-square.png").write_bytes(encoded(blue_square()))
    (tenants / "images" / "meadow.jpg").write_bytes(encoded(photo_like(), "JPEG"))
    (tenants / "images" / "logo.png").write_bytes(encoded(red_logo_on_white()))
    (tenants / "notes" / "palette.md").write_text("# Palette\n\nOur brand red is used for the logo.")
    with serve(Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=tenants)) as gateway:
        yield gateway


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_an_image_query_returns_the_nearest_images_as_image_hits(studio):
    query = b64(encoded(red_square(40), "JPEG", quality=70))
    hits = flat(studio.data(SEARCH, {"q": "red", "c": "photos", "image": query}, key=KEY)["search"]["hits"])
    assert [h["sourceId"] for h in hits][:1] == ["red-square.png"] and len(hits) == 3
    assert hits[0]["content"] == "A red square" and hits[0]["sourcePath"] == "red-square.png"
    assert {h["modality"] for h in hits} == {"IMAGE"}
    text = flat(studio.data(SEARCH, {"q": "brand red", "c": "notes"}, key=KEY)["search"]["hits"])
    assert text[0]["sourceId"] == "palette.md" and text[0]["modality"] == "TEXT"


@pytest.mark.parametrize("variables, code, message", [
    # A text query of an image-only collection, and an image query of a text one: no shared space.
    ({"q": "a red square", "c": "photos"}, "MODE_NOT_SUPPORTED",
     "a text query cannot search collection 'media/photos': its vectors come from 'colour-layout-8x8-v1', "
     "which maps image only"),
    ({"q": "red", "c": "notes", "image": b64(encoded(red_square()))}, "MODE_NOT_SUPPORTED",
     "an image query cannot search collection 'media/notes'"),
    ({"q": "red", "c": "photos", "image": "%%%"}, "INVALID_INPUT", "is not valid base64"),
    ({"q": "red", "c": "photos", "image": b64(encoded(red_square(), "GIF"))}, "INVALID_INPUT",
     "allowed: jpeg, png"),
])
def test_queries_across_modalities_and_bad_images_are_typed_errors(studio, variables, code, message):
    error = studio.error(SEARCH, variables, key=KEY)
    assert error["extensions"]["code"] == code and message in error["message"], error


def test_a_federated_text_search_leaves_the_image_collection_out_and_says_why(studio):
    body = studio.post(SEARCH, {"q": "brand red logo", "federated": True}, key=KEY).json()
    assert [h["chunk"]["sourceId"] for h in body["data"]["search"]["hits"]] == ["palette.md"]
    failures = body["extensions"]["partialFailures"]
    assert [(f["collection"], f["code"]) for f in failures] == [("media/photos", "MODE_NOT_SUPPORTED")]


def test_context_and_the_mcp_search_tool_take_an_image_too(studio):
    from tests.mcp.test_server import run

    query = b64(encoded(red_square(40), "JPEG", quality=70))
    block = studio.data('query($i: String) { context(input: {query: "red", collection: "photos", image: $i}) '
                        '{ text hits { chunk { sourceId modality } } } }', {"i": query}, key=KEY)["context"]
    assert block["hits"][0]["chunk"] == {"sourceId": "red-square.png", "modality": "IMAGE"}
    assert "[red-square.png/" in block["text"]

    async def action(session):
        return await session.call_tool("search", {"query": "red", "collection": "photos", "image": query})

    found = run(studio, KEY, action)
    assert not found.is_error, found
    assert found.structured_content["hits"][0]["sourceId"] == "red-square.png"


def test_modality_is_read_when_it_is_the_only_stored_field_selected(studio):
    """Identities and modality alone: the searches fetch keys only, and modality comes with the rows."""
    query = b64(encoded(red_square(40), "JPEG", quality=70))
    ask = """query($q: String!, $c: String, $image: String) {
      search(input: {query: $q, collection: $c, image: $image, facets: [{field: "modality"}]}) {
        hits { chunk { sourceId modality } } facets { fields { field buckets { label count } } } } }"""
    images = studio.data(ask, {"q": "red", "c": "photos", "image": query}, key=KEY)["search"]
    assert [h["chunk"]["modality"] for h in images["hits"]] == ["IMAGE"] * 3
    assert images["facets"]["fields"] == [{"field": "modality", "buckets": [{"label": "image", "count": 4}]}]
    text = studio.data(ask, {"q": "brand red", "c": "notes"}, key=KEY)["search"]
    assert text["hits"][0]["chunk"] == {"sourceId": "palette.md", "modality": "TEXT"}
    assert text["facets"]["fields"][0]["buckets"][0]["label"] == "text"
