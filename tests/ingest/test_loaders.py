import json
from pathlib import Path

import pytest

from gateway.errors import InvalidInput
from gateway.ingest.loaders import Unread, count_documents, load_paths
from tests.documents import PAGE_HTML, write_pdf
from tests.embedding.images import encoded, photo_like, red_square


def test_directory_of_markdown_and_text(tmp_path):
    (tmp_path / "guides").mkdir()
    (tmp_path / "guides" / "setup.md").write_text("# Setting up\n\nInstall it.")
    (tmp_path / "notes.txt").write_text("Plain notes.")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    docs = list(load_paths([tmp_path]))
    assert [(d.source_id, d.title) for d in docs] == [("guides/setup.md", "Setting up"), ("notes.txt", "notes")]
    # Relative to the folder given, never the server's absolute path (readers see it).
    assert [d.source_path for d in docs] == ["guides/setup.md", "notes.txt"]
    assert [d.source_path for d in load_paths([tmp_path / "guides" / "setup.md"])] == ["setup.md"]


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
    other = tmp_path / "a.docx"
    other.write_bytes(b"PK")
    with pytest.raises(InvalidInput, match=r"suffix '.docx' is not supported; allowed: .htm, .html, .jpeg, .jpg, "
                                           r".jsonl, .markdown, .md, .pdf, .png, .txt"):
        list(load_paths([other]))
    with pytest.raises(InvalidInput, match="no such file or directory"):
        list(load_paths([tmp_path / "missing"]))


def test_pdf_and_html_files_become_documents(tmp_path):
    write_pdf(tmp_path / "guide.pdf", ["Refunds take 14 days.", "Invoices are monthly."], title="Billing guide")
    (tmp_path / "refunds.html").write_text(PAGE_HTML)
    pdf, html = list(load_paths([tmp_path]))
    assert (pdf.source_id, pdf.title, pdf.pages) == ("guide.pdf", "Billing guide",
                                                      ("Refunds take 14 days.", "Invoices are monthly."))
    assert html.source_id == "refunds.html" and "Refunds are issued within 14 days" in html.text
    assert html.pages == ()


def test_unreadable_files_are_reported_with_the_reason_and_the_rest_still_load(tmp_path):
    (tmp_path / "good.md").write_text("# Good\n\nReadable.")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    write_pdf(tmp_path / "scan.pdf", [""])
    unreadable: list[Unread] = []
    docs = list(load_paths([tmp_path], unreadable))
    assert [d.source_id for d in docs] == ["good.md"]
    assert [(u.path.rsplit("/", 1)[-1], u.reason.split(" (")[0].split(";")[0]) for u in unreadable] == [
        ("latin1.txt", "not UTF-8 text"), ("scan.pdf", "none of its 1 page(s) has a text layer")]
    assert "byte 0xe9 at offset 3" in unreadable[0].reason
    # Without a list to report into, the first unreadable file stops the load, named.
    with pytest.raises(InvalidInput, match=r"cannot ingest '.*latin1.txt': not UTF-8 text"):
        list(load_paths([tmp_path]))


def test_count_documents_counts_files_and_jsonl_lines(tmp_path):
    (tmp_path / "a.md").write_text("A")
    (tmp_path / "c.jsonl").write_text('{"_id": "1", "text": "x"}\n\n{"_id": "2", "text": "y"}\n')
    assert count_documents([tmp_path]) == 3


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


def test_jsonl_lines_bring_chunks_with_vectors_or_one_vector(tmp_path):
    corpus = tmp_path / "vectors.jsonl"
    corpus.write_text("\n".join(json.dumps(line) for line in [
        {"_id": "a", "title": "A", "chunks": [{"text": "one", "vector": [1, 0, 0]},
                                              {"text": "two", "vector": [0, 1, 0], "parent": 0}]},
        {"_id": "b", "text": "the whole document", "vector": [0.5, 0.5, 0]},
        {"_id": "c", "text": "embedded by the gateway"},
    ]) + "\n", encoding="utf-8")
    a, b, c = load_paths([corpus])
    assert [(ch.text, ch.vector.tolist(), ch.parent) for ch in a.chunks] == [("one", [1, 0, 0], None),
                                                                            ("two", [0, 1, 0], 0)]
    assert a.text == "" and a.title == "A"
    assert [(ch.text, ch.vector.tolist()) for ch in b.chunks] == [("the whole document", [0.5, 0.5, 0])]
    assert c.chunks == ()


@pytest.mark.parametrize("line, reason", [
    ({"_id": "a", "chunks": [{"text": "x", "vector": [1, "NaN"]}]}, r"vector of document 'a' chunks\[0\] must be a list of numbers"),
    ({"_id": "a", "chunks": [{"text": "x"}]}, r"vector of document 'a' chunks\[0\] must be a list of numbers, got null"),
    ({"_id": "a", "chunks": [{"vector": [1.0]}]}, r"chunks\[0\] must be an object with a string 'text'"),
    ({"_id": "a", "chunks": [{"text": "x", "vector": [1.0], "parent": "0"}]}, r"parent of chunks\[0\] must be an integer"),
    ({"_id": "a", "text": "t", "chunks": [{"text": "x", "vector": [1.0]}]}, "or 'chunks', not both"),
    ({"_id": "a", "vector": [1.0]}, "'vector' needs 'text'"),
    ({"_id": "a", "text": "t", "vector": [1e40]}, "beyond float32's range"),
])
def test_bad_vector_lines_name_file_line_and_reason(tmp_path, line, reason):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text(json.dumps(line) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match=rf"bad.jsonl:1: .*{reason}"):
        list(load_paths([corpus]))


def _b64(values) -> str:
    import base64

    import numpy as np

    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


def test_jsonl_vectors_as_base64_float32_load_as_their_lists_do(tmp_path):
    as_lists = tmp_path / "lists.jsonl"
    as_base64 = tmp_path / "base64.jsonl"
    lines = [{"_id": "a", "chunks": [{"text": "one", "vector": [0.25, -1.5, 3.0]},
                                     {"text": "two", "vector": [1, 0, 0], "parent": 0}]},
             {"_id": "b", "text": "whole", "vector": [0.5, 0.5, 0.125]}]
    as_lists.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    encoded = [{**lines[0], "chunks": [{**c, "vector": _b64(c["vector"])} for c in lines[0]["chunks"]]},
               {**lines[1], "vector": _b64(lines[1]["vector"])}]
    as_base64.write_text("\n".join(json.dumps(line) for line in encoded) + "\n", encoding="utf-8")
    for listed, decoded in zip(load_paths([as_lists]), load_paths([as_base64])):
        assert [(c.text, c.vector.tolist(), c.parent) for c in listed.chunks] == \
               [(c.text, c.vector.tolist(), c.parent) for c in decoded.chunks]


@pytest.mark.parametrize("lines, reason", [
    ([{"_id": "a", "chunks": [{"text": "x", "vector": [1.0, 2.0]}, {"text": "y", "vector": _b64([1.0, 2.0])}]}],
     r"bad.jsonl:1: document 'a': the vector of chunks\[1\] is base64 text, and that of chunks\[0\] a list of "
     r"numbers; allowed: one encoding per file"),
    ([{"_id": "a", "text": "x", "vector": _b64([1.0, 2.0])}, {"_id": "b", "text": "y", "vector": [1.0, 2.0]}],
     r"bad.jsonl:2: document 'b' gives its vectors as a list of numbers, and line 1 as base64 text; allowed: one "
     r"encoding per file"),
    ([{"_id": "a", "chunks": [{"text": "x", "vector": "AAAAAAA="}]}],
     r"bad.jsonl:1: vector of document 'a' chunks\[0\] is 8 characters of base64 that decode to 5 bytes, not a "
     r"whole number of float32 values"),
    ([{"_id": "a", "chunks": [{"text": "x", "vector": "AAAAAA="}]}],
     r"bad.jsonl:1: vector of document 'a' chunks\[0\] is 7 characters that are not base64"),
    ([{"_id": "a", "chunks": [{"text": "x", "vector": _b64([1.0, float("nan")])}]}],
     r"bad.jsonl:1: vector of document 'a' chunks\[0\] has a non-finite value \(nan\) at \[1\]"),
    ([{"_id": "a", "chunks": [{"text": "x", "vector": [1.0, True]}]}],
     r"bad.jsonl:1: vector of document 'a' chunks\[0\] must be a list of numbers"),
])
def test_bad_or_mixed_vector_encodings_name_the_line_and_what_is_allowed(tmp_path, lines, reason):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match=reason):
        list(load_paths([corpus]))


def test_a_jsonl_line_that_is_not_utf8_names_its_line(tmp_path):
    corpus = tmp_path / "latin1.jsonl"
    corpus.write_bytes(b'{"_id": "a", "text": "fine"}\n\n  \n{"_id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(InvalidInput, match=r"latin1.jsonl:4: not UTF-8 \(byte 0xe9 at offset 25\); allowed: UTF-8 JSON lines"):
        list(load_paths([corpus]))
