"""Collection modality in tenant files: image collections name their encoder; cross-modal ones are refused."""

from pathlib import Path

import pytest

from gateway.embedding.base import Modality
from gateway.embedding.modal import ImageEncoder
from gateway.errors import ConfigError
from gateway.retrieval.options import Mode
from gateway.tenancy.loader import load_tenants, read_tenants

TENANT = """
id: acme
api_keys:
  - {sha256: "%s", role: reader}
namespaces:
  media:
    collections:
      photos: %%s
""" % ("a" * 64)


def problems(tmp_path: Path, collection: str) -> list[str]:
    (tmp_path / "acme.yaml").write_text(TENANT % collection)
    _, found = read_tenants(tmp_path)
    return [str(p) for p in found]


def test_collections_hold_text_unless_they_say_otherwise(tmp_path):
    (tmp_path / "acme.yaml").write_text(TENANT % "{trust_tier: first-party}")
    photos = load_tenants(tmp_path)["acme"].namespaces["media"].collections["photos"]
    assert photos.modality == (Modality.TEXT,) and photos.image_encoder is None and photos.mode is Mode.HYBRID


def test_an_image_collection_with_the_shipped_encoder_searches_dense(tmp_path):
    (tmp_path / "acme.yaml").write_text(TENANT % "{trust_tier: first-party, modality: [image], image_encoder: colour-layout}")
    photos = load_tenants(tmp_path)["acme"].namespaces["media"].collections["photos"]
    assert photos.modality == (Modality.IMAGE,) and photos.image_encoder is ImageEncoder.COLOUR_LAYOUT
    assert photos.mode is Mode.DENSE


@pytest.mark.parametrize("collection, message", [
    # Text and images in one collection need one space for both: no encoder here has it.
    ("{trust_tier: first-party, modality: [text, image], image_encoder: colour-layout}",
     "modality [text, image] needs one encoder that maps text and images into one space (CLIP-style); "
     "image_encoder 'colour-layout' maps image only"),
    ("{trust_tier: first-party, modality: [image]}",
     "modality [image] needs an image encoder, and none is named; allowed image_encoder: colour-layout"),
    ("{trust_tier: first-party, modality: [text, image]}",
     "No cross-modal (CLIP-style) encoder is available: no registry package ships one (docs/multimodal.md)"),
    ("{trust_tier: first-party, modality: [image], image_encoder: colour-layout, mode: hybrid}",
     "mode 'hybrid' needs words to match; an image collection searches mode 'dense' only"),
    ("{trust_tier: first-party, image_encoder: colour-layout}",
     "image_encoder 'colour-layout' needs modality: [image]"),
    ("{trust_tier: first-party, modality: [image], image_encoder: clip}",
     "image_encoder: Input should be 'colour-layout'; got 'clip'"),
    ("{trust_tier: first-party, modality: [video]}", "Input should be 'text' or 'image'; got 'video'"),
    ("{trust_tier: first-party, modality: []}", "modality is empty"),
])
def test_collections_an_encoder_cannot_serve_are_refused_at_load(tmp_path, collection, message):
    found = problems(tmp_path, collection)
    assert any("acme.yaml" in p and "namespaces.media.collections.photos" in p and message in p for p in found), found
    with pytest.raises(ConfigError, match="problem"):
        load_tenants(tmp_path)
