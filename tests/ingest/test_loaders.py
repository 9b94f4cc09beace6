import json
from pathlib import Path

import pytest

from gateway.errors import InvalidInput
from gateway.ingest.loaders import load_paths
from tests.embedding.images import encoded, photo_like, red_square


def test_directory_of_markdown_and_text(tmp_path):
    (tmp_path / "guides").mkdir()
    (tmp_path / "guides" / "setup.md").write_text("# Setting up\n\nInstall it.")
    (tmp_path / "notes.txt").write_text("Plain notes.")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    docs = list(load_paths([tmp_path]))
    assert [(d.source_id, d.title) for d in docs] == [("guides/setup.md", "Setting up"), ("notes.txt", "notes")]
    assert docs[0].source_path.endswith("guides/setup.md")


def test_beir_jsonl(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"_id": "1", "title": "One", "text": "first", "metadata": {"year": 2020}},
        {"_id": "2", "title": "", "text": "second", "metadata": {}, "url": "https://x/2", "path": "/srv/2.pdf"},
    ]) + "\n")
    docs = list(load_paths([path]))
    assert [(d.source_id, d.title, d.metadata, d.source_url, d.source_path) for d in docs] == [
        ("1", "One", {"year": 2020}, "", ""), ("2", "", {}, "https://x/2", "/srv/2.pdf")]


def test_paths_given_relative_or_absolute_load_identically(tmp_path, monkeypatch):
    (tmp_path / "a.md").write_text("# A\n\nBody.")
    monkeypatch.chdir(tmp_path)
    assert list(load_paths([tmp_path / "a.md"])) == list(load_paths([Path("a.md")]))


def test_bad_jsonl_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"_id": "1", "text": "ok"}\n{"_id": 5, "text": "no"}\n')
    with pytest.raises(InvalidInput, match=r"bad.jsonl:2: '_id' must be a non-empty string, got 5"):
        list(load_paths([path]))


def test_unsupported_file_and_missing_path(tmp_path):
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(b"%PDF")
    with pytest.raises(InvalidInput, match=r"suffix '.pdf' is not supported; allowed: .jpeg, .jpg, .jsonl, .markdown, .md, .png, .txt"):
        list(load_paths([pdf]))
    with pytest.raises(InvalidInput, match="no such file or directory"):
        list(load_paths([tmp_path / "missing"]))


def test_image_collections_load_images_captioned_by_a_sidecar_or_their_name(tmp_path):
    (tmp_path / "shapes").mkdir()
    (tmp_path / "shapes" / "red-square.png").write_bytes(encoded(red_square()))
    (tmp_path / "shapes" / "red-square.png.txt").write_text("A red square on nothing\n")
    (tmp_path / "meadow_photo.JPG").write_bytes(encoded(photo_like(), "JPEG"))
    (tmp_path / "README.md").write_text("# Shapes")
    # A directory gives an image collection its images, and a text collection its text.
    docs = {d.source_id: d for d in load_paths([tmp_path], images=True)}
    assert sorted(docs) == ["meadow_photo.JPG", "shapes/red-square.png"]
    assert [d.source_id for d in load_paths([tmp_path])] == ["README.md", "shapes/red-square.png.txt"]
    square = docs["shapes/red-square.png"]
    assert square.text == "A red square on nothing" and square.title == "red square"
    assert square.image == encoded(red_square())
    assert docs["meadow_photo.JPG"].text == "meadow photo" and docs["meadow_photo.JPG"].image.startswith(b"\xff\xd8")
