"""Near-duplicate image retrieval with the shipped colour-layout encoder, on generated images.

    nice -n 5 .venv/bin/python benchmarks/image_encoder.py --images 500 --seed 7

Each corpus image is a random layout of 2-6 rectangles over a gradient with noise, all
in six colours. Each
query is one corpus image transformed the way copies of an image drift: resized (0.5-1.5x),
re-encoded as JPEG (quality 40-90), brightened or darkened (+-10%) and cropped (up to 10% a side).
Reported: recall@1 and @5 of the original among all corpus images, for the encoder and for a
plain 8x8 RGB thumbnail (the same grid without YCbCr, DCT or frequency damping), and encoding
time per image measured interleaved. This measures what the encoder is for (finding the same
picture again); it says nothing of meaning, which no shipped encoder captures (docs/multimodal.md).
"""

from __future__ import annotations

import argparse
import io
import time

import numpy as np
from PIL import Image, ImageEnhance

from gateway.embedding.colour_layout import ColourLayoutEmbedder
from gateway.embedding.images import open_image


# A small palette makes images alike: many share colours, and only their layout tells them apart.
PALETTE = np.array([[200, 30, 30], [30, 60, 200], [40, 160, 60], [240, 220, 60], [250, 250, 250], [30, 30, 30]])


def corpus_image(rng: np.random.Generator, size: int = 160) -> Image.Image:
    top, bottom = PALETTE[rng.integers(0, len(PALETTE), 2)]
    rows = np.linspace(0, 1, size)[:, None, None]
    pixels = top * (1 - rows) + bottom * rows + rng.normal(0, 12, (size, size, 3))
    for _ in range(int(rng.integers(2, 7))):
        x0, y0 = rng.integers(0, size - 20, 2)
        w, h = rng.integers(15, size // 2, 2)
        pixels[y0:y0 + h, x0:x0 + w] = PALETTE[rng.integers(0, len(PALETTE))]
    return Image.fromarray(np.clip(pixels, 0, 255).astype("uint8"))


def drifted(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    w, h = image.size
    cut = rng.uniform(0, 0.10, 4)
    image = image.crop((int(cut[0] * w), int(cut[1] * h), w - int(cut[2] * w), h - int(cut[3] * h)))
    scale = rng.uniform(0.5, 1.5)
    image = image.resize((max(8, int(image.width * scale)), max(8, int(image.height * scale))))
    image = ImageEnhance.Brightness(image).enhance(rng.uniform(0.9, 1.1))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=int(rng.integers(40, 91)))
    return open_image(buffer.getvalue())


def thumbnail(images: list[Image.Image]) -> np.ndarray:
    rows = np.stack([np.asarray(i.resize((8, 8), Image.Resampling.BOX), dtype=np.float32).ravel() - 128
                     for i in images])
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)


def recall(corpus: np.ndarray, queries: np.ndarray, k: int) -> float:
    ranks = np.argsort(-(queries @ corpus.T), axis=1)[:, :k]
    return float(np.mean([i in ranks[i] for i in range(len(queries))]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    originals = [corpus_image(rng) for _ in range(args.images)]
    queries = [drifted(i, rng) for i in originals]
    encoder = ColourLayoutEmbedder()
    timings = {"colour-layout": 0.0, "thumbnail": 0.0}
    vectors: dict[str, list[np.ndarray]] = {"colour-layout": [], "thumbnail": []}
    # Interleaved, one image at a time, so both see the same machine load.
    for image in originals + queries:
        t0 = time.perf_counter()
        vectors["colour-layout"].append(encoder.embed_images([image])[0])
        t1 = time.perf_counter()
        vectors["thumbnail"].append(thumbnail([image])[0])
        t2 = time.perf_counter()
        timings["colour-layout"] += t1 - t0
        timings["thumbnail"] += t2 - t1
    n = args.images
    print(f"{n} images, seed {args.seed}")
    print("| encoder | recall@1 | recall@5 | ms per image |")
    print("| --- | --- | --- | --- |")
    for name, rows in vectors.items():
        matrix = np.stack(rows)
        corpus, query = matrix[:n], matrix[n:]
        print(f"| {name} | {recall(corpus, query, 1):.3f} | {recall(corpus, query, 5):.3f} | "
              f"{1000 * timings[name] / (2 * n):.3f} |")


if __name__ == "__main__":
    main()
