"""Which encoder a collection's vectors come from, and what it can be queried with.

A text collection uses the gateway's embedder (GATEWAY_EMBEDDER). A collection that declares
`modality: [image]` names an image encoder (`image_encoder:`), whose space its vectors live in.
Searching a collection means embedding the query in that collection's space, so a query's
modality must be one the encoder maps: that is the whole cross-modal rule, checked here.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from functools import cache

import numpy as np

from gateway.embedding.base import Embedder, ImageEmbedder, Modality, modalities_of
from gateway.errors import ModeNotSupported, allowed

MULTIMODAL_DOCS = "docs/multimodal.md"


class ImageEncoder(StrEnum):
    """Image encoders that ship with the gateway (a tenant file's `image_encoder`)."""

    COLOUR_LAYOUT = "colour-layout"


# What each encoder maps into one space; known without loading it, so config validation can
# refuse a collection the encoder cannot serve.
ENCODER_MODALITIES: Mapping[ImageEncoder, frozenset[Modality]] = {
    ImageEncoder.COLOUR_LAYOUT: frozenset({Modality.IMAGE}),
}


class ModalityNotSupported(ModeNotSupported):
    """A query or document of a modality the collection's encoder does not map (MODE_NOT_SUPPORTED)."""


@cache
def image_encoder(kind: ImageEncoder) -> ImageEmbedder:
    """One shared instance per encoder: they are stateless."""
    from gateway.embedding.colour_layout import ColourLayoutEmbedder

    return {ImageEncoder.COLOUR_LAYOUT: ColourLayoutEmbedder}[kind]()


def collection_embedder(config: object, text_embedder: Embedder | None) -> Embedder | ImageEmbedder | None:
    """The encoder whose space the collection's vectors are in."""
    kind = getattr(config, "image_encoder", None)
    return image_encoder(kind) if kind is not None else text_embedder


def embed_query(encoder: object, label: str, *, text: str, image: object | None, tenant: str) -> np.ndarray:
    """The query's vector in the collection's space; a modality the encoder lacks is refused."""
    wanted = Modality.IMAGE if image is not None else Modality.TEXT
    check_query_modality(encoder, label, wanted)
    if image is not None:
        return encoder.embed_images([image])[0]  # type: ignore[attr-defined]
    return encoder.embed_query(text, tenant)  # type: ignore[attr-defined]


def check_query_modality(encoder: object, label: str, wanted: Modality) -> None:
    has = modalities_of(encoder)
    if wanted in has:
        return
    name = getattr(encoder, "name", "none")
    query = f"an {wanted.value} query" if wanted is Modality.IMAGE else f"a {wanted.value} query"
    if wanted is Modality.TEXT:
        hint = "search it with `image:` (an image query), or add a text collection"
    else:
        hint = "search an image collection with it, or search this collection with text"
    raise ModalityNotSupported(
        f"{query} cannot search collection {label!r}: its vectors come from {name!r}, which maps "
        f"{allowed(has)} only; {query} needs an encoder with text and image in one space "
        f"(CLIP-style), and none ships with this gateway ({MULTIMODAL_DOCS}); {hint}")
