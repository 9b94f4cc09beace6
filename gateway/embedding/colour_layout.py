"""A small image encoder the gateway can ship: a colour-layout descriptor, no learned weights.

The image is area-averaged to an 8x8 grid in YCbCr (luma and two colour differences, centred on
0), each channel is transformed with a 2-D DCT-II, and coefficients are damped by frequency, as
MPEG-7's Colour Layout Descriptor does, so the coarse layout of colours counts more than fine
detail. Cosine similarity then finds images with the same colours in the same places: near
duplicates, re-encodes, crops of one scene, "more like this red logo".

It maps images only. It knows nothing of what an image shows, so it cannot answer a text query,
and a text collection cannot be searched with it: that needs a CLIP-style model with text and
image towers in one space, which no registry package ships (docs/multimodal.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gateway.embedding.base import Modality

NAME = "colour-layout-8x8-v1"
GRID = 8
CHANNELS = 3
# One constant component: a flat mid-grey image (all coefficients 0) still has a direction, and
# every vector keeps a small shared part, so no two images are exactly orthogonal by accident.
BIAS = 16.0
DIM = GRID * GRID * CHANNELS + 1


def _dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II matrix: D @ x is the DCT of x."""
    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    matrix = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    matrix[0] /= np.sqrt(2.0)
    return matrix.astype(np.float32)


_DCT = _dct_matrix(GRID)
# Frequency damping 1 / (1 + (u + v) / 2): the DC term weighs 1, the finest 8x8 detail 1/8. An
# orthonormal DCT alone leaves cosine similarity unchanged; the damping is what makes the
# descriptor tolerant of small shifts and noise.
_WEIGHTS = (1.0 / (1.0 + (np.arange(GRID)[:, None] + np.arange(GRID)[None, :]) / 2.0)).astype(np.float32)


class ColourLayoutEmbedder:
    """Images to 193-dimensional unit vectors; deterministic, about 1 ms an image on one core."""

    name = NAME
    dim = DIM
    modalities = frozenset({Modality.IMAGE})

    def embed_images(self, images: Sequence[object]) -> np.ndarray:
        """Rows for RGB PIL images (gateway.embedding.images.open_image decodes and bounds them)."""
        from PIL import Image

        out = np.empty((len(images), DIM), dtype=np.float32)
        for row, image in enumerate(images):
            small = image.resize((GRID, GRID), Image.Resampling.BOX)  # type: ignore[attr-defined]
            ycc = np.asarray(small.convert("YCbCr"), dtype=np.float32) - 128.0
            parts = [(_DCT @ ycc[:, :, c] @ _DCT.T) * _WEIGHTS for c in range(CHANNELS)]
            vector = np.concatenate([p.ravel() for p in parts] + [np.array([BIAS], dtype=np.float32)])
            out[row] = vector / np.linalg.norm(vector)
        return out
