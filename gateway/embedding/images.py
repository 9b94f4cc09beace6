"""Decoding images from clients and files: PNG and JPEG only, bounded in bytes and pixels.

Validated once here, at the boundary, so encoders trust what they get: an RGB PIL image.
"""

from __future__ import annotations

import base64
import binascii
import io
from enum import StrEnum

from gateway.errors import InvalidInput, allowed

# A query image travels inside a GraphQL request (base64 adds a third); 4 MiB decoded keeps the
# request well under the body limits of proxies in front of the gateway.
MAX_QUERY_IMAGE_BYTES = 4 * 1024 * 1024
# An ingested image file.
MAX_IMAGE_BYTES = 32 * 1024 * 1024
# Pixels are checked from the header before decoding: a small PNG can claim gigapixels.
MAX_PIXELS = 40_000_000


class ImageFormat(StrEnum):
    """The formats ingest and `search(image:)` accept (Pillow's format names, lowercased)."""

    PNG = "png"
    JPEG = "jpeg"


IMAGE_SUFFIXES = {".png": ImageFormat.PNG, ".jpg": ImageFormat.JPEG, ".jpeg": ImageFormat.JPEG}


def decode_base64_image(value: str, *, max_bytes: int = MAX_QUERY_IMAGE_BYTES) -> bytes:
    """The bytes of a base64 (standard or URL-safe, optionally a `data:image/...;base64,` URL) image."""
    text = value.strip()
    if text.startswith("data:"):
        header, _, text = text.partition(",")
        if not header.endswith(";base64"):
            raise InvalidInput(f"image data URL header {header[:40]!r} is not base64; "
                               "allowed: data:image/png;base64,... or plain base64")
    if len(text) > (max_bytes * 4) // 3 + 4:
        raise InvalidInput(f"image is about {len(text) * 3 // 4} bytes; at most {max_bytes} are accepted")
    try:
        data = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"image {text[:20]!r}... is not valid base64; "
                           "allowed: base64 of a PNG or JPEG file") from None
    return data


def open_image(data: bytes, *, where: str = "image", max_bytes: int = MAX_IMAGE_BYTES):
    """An RGB PIL image from PNG or JPEG bytes; anything else is INVALID_INPUT naming what is allowed."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise InvalidInput(f"{where} is empty; allowed: a PNG or JPEG file")
    if len(data) > max_bytes:
        raise InvalidInput(f"{where} is {len(data)} bytes; at most {max_bytes} are accepted")
    try:
        image = Image.open(io.BytesIO(data), formats=[f.value.upper() for f in ImageFormat])
    except UnidentifiedImageError:
        raise InvalidInput(f"{where} ({len(data)} bytes starting {data[:8]!r}) is not an image of an allowed "
                           f"format; allowed: {allowed(ImageFormat)}") from None
    width, height = image.size
    if width * height > MAX_PIXELS:
        raise InvalidInput(f"{where} is {width}x{height} pixels; at most {MAX_PIXELS} pixels are accepted")
    try:
        image.load()
    except (OSError, SyntaxError, ValueError) as exc:  # truncated or corrupt data past the header
        raise InvalidInput(f"{where} ({image.format}, {width}x{height}) could not be decoded: {exc}") from None
    return image.convert("RGB")

