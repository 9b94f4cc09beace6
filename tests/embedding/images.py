"""Small test images made with Pillow: flat colours and a photo-like pattern."""

import io

import numpy as np
from PIL import Image


def encoded(image: Image.Image, fmt: str = "PNG", **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def red_square(size: int = 64) -> Image.Image:
    return Image.new("RGB", (size, size), (220, 20, 20))


def blue_square(size: int = 64) -> Image.Image:
    return Image.new("RGB", (size, size), (20, 40, 200))


def photo_like(size: int = 64, seed: int = 0) -> Image.Image:
    """A sky-to-grass gradient with noise: many colours, laid out top to bottom."""
    rng = np.random.default_rng(seed)
    rows = np.linspace(0, 1, size)[:, None, None]
    sky, grass = np.array([120, 170, 235]), np.array([60, 140, 50])
    pixels = sky * (1 - rows) + grass * rows + rng.normal(0, 18, (size, size, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype("uint8"))


def red_logo_on_white(size: int = 64) -> Image.Image:
    image = Image.new("RGB", (size, size), (250, 250, 250))
    image.paste(red_square(size // 2), (size // 4, size // 4))
    return image
