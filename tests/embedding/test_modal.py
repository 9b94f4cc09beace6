"""A query must be of a modality the collection's encoder maps; nothing here maps text and images together."""

import pytest

from gateway.embedding.base import Modality
from gateway.embedding.colour_layout import ColourLayoutEmbedder
from gateway.embedding.modal import (
    ENCODER_MODALITIES,
    ImageEncoder,
    ModalityNotSupported,
    check_query_modality,
    collection_embedder,
    image_encoder,
)
from gateway.errors import ErrorCode
from tests.conftest import make_ref


def test_a_text_query_cannot_search_an_image_only_space():
    with pytest.raises(ModalityNotSupported, match="a text query cannot search collection 'media/photos'") as caught:
        check_query_modality(ColourLayoutEmbedder(), "media/photos", Modality.TEXT)
    assert caught.value.code is ErrorCode.MODE_NOT_SUPPORTED
    assert "maps image only" in caught.value.message and "CLIP-style" in caught.value.message


def test_an_image_query_cannot_search_a_text_space(embedder):
    with pytest.raises(ModalityNotSupported, match="an image query cannot search collection 'support/docs'") as caught:
        check_query_modality(embedder, "support/docs", Modality.IMAGE)
    assert "all-MiniLM-L6-v2-onnx-int8" in caught.value.message and "maps text only" in caught.value.message


def test_each_collection_gets_the_encoder_of_its_vectors(embedder):
    photos = make_ref(modality=["image"], image_encoder="colour-layout")
    assert collection_embedder(photos.config, embedder) is image_encoder(ImageEncoder.COLOUR_LAYOUT)
    assert collection_embedder(make_ref().config, embedder) is embedder
    # Declared modalities match what the encoder really maps.
    for kind, modalities in ENCODER_MODALITIES.items():
        assert image_encoder(kind).modalities == modalities
