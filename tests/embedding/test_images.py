"""Query and ingest images are validated once: format, size, pixels, base64; each refusal says what is allowed."""

import base64

import pytest
from PIL import Image

from gateway.embedding.images import MAX_PIXELS, decode_base64_image, open_image
from gateway.errors import ErrorCode, InvalidInput
from tests.embedding.images import encoded, red_square


def test_png_and_jpeg_decode_to_rgb_from_plain_base64_and_data_urls():
    png = encoded(red_square(), "PNG")
    jpeg = encoded(red_square().convert("L"), "JPEG")
    assert decode_base64_image(base64.b64encode(png).decode()) == png
    assert decode_base64_image("data:image/png;base64," + base64.urlsafe_b64encode(png).decode()) == png
    for data in (png, jpeg):
        image = open_image(data)
        assert image.mode == "RGB" and image.size == (64, 64)


@pytest.mark.parametrize("data, message", [
    (b"", "is empty; allowed: a PNG or JPEG file"),
    (b"GIF89a" + b"\x00" * 40, "allowed: jpeg, png"),
    (encoded(red_square(), "GIF"), "allowed: jpeg, png"),
    (encoded(red_square(), "PNG")[:60], "could not be decoded"),
])
def test_other_formats_and_broken_files_are_refused(data, message):
    with pytest.raises(InvalidInput, match=message) as caught:
        open_image(data, where="query image")
    assert caught.value.code is ErrorCode.INVALID_INPUT and "query image" in caught.value.message


def test_size_and_pixel_bounds_are_checked_before_decoding():
    with pytest.raises(InvalidInput, match="is 1000 bytes; at most 999"):
        open_image(b"x" * 1000, max_bytes=999)
    # A tiny file whose header claims more pixels than allowed is refused from the header.
    huge = encoded(Image.new("1", (8000, 6000)), "PNG")
    assert len(huge) < 100_000
    with pytest.raises(InvalidInput, match=f"8000x6000 pixels; at most {MAX_PIXELS}"):
        open_image(huge)


def test_bad_base64_and_oversized_strings_are_refused():
    with pytest.raises(InvalidInput, match="not valid base64; allowed: base64 of a PNG or JPEG"):
        decode_base64_image("not base64 at all!")
    with pytest.raises(InvalidInput, match="at most 30 are accepted"):
        decode_base64_image("A" * 400, max_bytes=30)
    with pytest.raises(InvalidInput, match="is not base64"):
        decode_base64_image("data:image/png,rawbytes")
