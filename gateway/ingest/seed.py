"""Seed corpora named in tenant files: ingested on first start, or on `gateway sync`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gateway.ingest.loaders import load_paths
from gateway.ingest.sync import IngestReport, ingest_documents
from gateway.runtime import Runtime
from gateway.tenancy.config import CorpusConfig


def ingest_seeds(runtime: Runtime, *, force: bool = False) -> Iterator[tuple[str, IngestReport]]:
    """Ingest each tenant's seed corpora; without `force`, only into collections that do not exist yet.

    Seed paths are relative to the tenants directory.
    """
    base = runtime.settings.tenants_dir
    for tenant in runtime.registry:
        for corpus in tenant.seed:
            ref = runtime.registry.resolve(tenant.id, corpus.collection, namespace=corpus.namespace)
            if not force and runtime.store.exists(ref.scope):
                continue
            documents = load_paths(seed_paths(base, corpus), images="image" in ref.config.modality)
            report = ingest_documents(runtime.store, runtime.embedder, ref, documents, prune=True,
                                      tokens=runtime.token_store_for(ref))
            yield f"{tenant.id}:{ref.label}", report


def seed_paths(base: Path, corpus: CorpusConfig) -> list[Path]:
    """A seed corpus's paths: relative ones are read from the tenants directory `base`."""
    return [(base / p) if not Path(p).is_absolute() else Path(p) for p in corpus.paths]
