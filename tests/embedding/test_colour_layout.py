"""The shipped image encoder: unit vectors, deterministic, similar layouts of colour rank first."""

import numpy as np

from gateway.embedding.base import Modality, modalities_of
from gateway.embedding.colour_layout import DIM, ColourLayoutEmbedder
from gateway.embedding.images import open_image
from tests.embedding.images import blue_square, encoded, photo_like, red_logo_on_white, red_square


def test_vectors_are_unit_length_deterministic_and_of_the_declared_size():
    encoder = ColourLayoutEmbedder()
    grey = red_square().convert("L").convert("RGB").point(lambda _: 128)  # flat mid-grey: every coefficient 0
    vectors = encoder.embed_images([red_square(), photo_like(), grey])
    assert vectors.shape == (3, DIM) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors, encoder.embed_images([red_square(), photo_like(), grey]))


def test_a_re_encoded_resized_image_is_nearest_to_its_original():
    encoder = ColourLayoutEmbedder()
    corpus = [red_square(), blue_square(), photo_like(seed=1), red_logo_on_white()]
    stored = encoder.embed_images(corpus)
    queries = [open_image(encoded(red_square(40), "JPEG", quality=60)),   # smaller, lossy
               open_image(encoded(photo_like(96, seed=2), "JPEG", quality=75)),  # same scene, other noise
               open_image(encoded(red_logo_on_white(128)))]
    nearest = [int(np.argmax(stored @ q)) for q in encoder.embed_images(queries)]
    assert nearest == [0, 2, 3]


def test_it_maps_images_only():
    assert modalities_of(ColourLayoutEmbedder()) == {Modality.IMAGE}
