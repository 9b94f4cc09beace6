"""Collection modality in tenant files: image collections name their encoder; cross-modal ones are refused."""

import re
from pathlib import Path

import pytest

from gateway.embedding.base import Modality
from gateway.embedding.modal import ImageEncoder
from gateway.errors import ConfigError
from gateway.retrieval.options import Mode
from gateway.tenancy.loader import load_tenants, read_tenants

TENANT = """
id: acme
api_keys:
  - {sha256: "%s", role: reader}
namespaces:
  media:
    collections:
      photos: %%s
""" % ("a" * 64)


def problems(tmp_path: Path, collection: str) -> list[str]:
    (tmp_path / "acme.yaml").write_text(TENANT % collection)
    _, found = read_tenants(tmp_path)
    return [str(p) for p in found]


def test_collections_hold_text_unless_they_say_otherwise(tmp_path):
    (tmp_path / "acme.yaml").write_text(TENANT % "{trust_tier: first-party}")
    photos = load_tenants(tmp_path)["acme"].namespaces["media"].collections["photos"]
    assert photos.modality == (Modality.TEXT,) and photos.image_encoder is None and photos.mode is Mode.HYBRID


def test_an_image_collection_with_the_shipped_encoder_searches_dense(tmp_path):
    (tmp_path / "acme.yaml").write_text(TENANT % "{trust_tier: first-party, modality: [image], image_encoder: colour-layout}")
    photos = load_tenants(tmp_path)["acme"].namespaces["media"].collections["photos"]
    assert photos.modality == (Modality.IMAGE,) and photos.image_encoder is ImageEncoder.COLOUR_LAYOUT
    assert photos.mode is Mode.DENSE


@pytest.mark.parametrize("collection, message", [
    # Text and images in one collection need one space for both: no encoder here has it.
    ("{trust_tier: first-party, modality: [text, image], image_encoder: colour-layout}",
     "modality [text, image] needs one encoder that maps text and images into one space (CLIP-style); "
     "image_encoder 'colour-layout' maps image only"),
    ("{trust_tier: first-party, modality: [image]}",
     "modality [image] needs an image encoder, and none is named; allowed image_encoder: colour-layout"),
    ("{trust_tier: first-party, modality: [text, image]}",
     "No cross-modal (CLIP-style) encoder is available: no registry package ships one (docs/multimodal.md)"),
    ("{trust_tier: first-party, modality: [image], image_encoder: colour-layout, mode: hybrid}",
     "mode 'hybrid' needs words to match; an image collection searches mode 'dense' only"),
    ("{trust_tier: first-party, image_encoder: colour-layout}",
     "image_encoder 'colour-layout' needs modality: [image]"),
    ("{trust_tier: first-party, modality: [image], image_encoder: clip}",
     "image_encoder: Input should be 'colour-layout'; got 'clip'"),
    ("{trust_tier: first-party, modality: [video]}", "Input should be 'text' or 'image'; got 'video'"),
    ("{trust_tier: first-party, modality: []}", "modality is empty"),
])
def test_collections_an_encoder_cannot_serve_are_refused_at_load(tmp_path, collection, message):
    found = problems(tmp_path, collection)
    assert any("acme.yaml" in p and "namespaces.media.collections.photos" in p and message in p for p in found), found
    with pytest.raises(ConfigError, match="problem"):
        load_tenants(tmp_path)


def _keys(node) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for value in node.values() for k in _keys(value)}
    if isinstance(node, list):
        return {k for value in node for k in _keys(value)}
    return set()


def _fields(model, seen: set) -> set[tuple[str, str]]:
    """(model, field) for every field of `model` and of the models it nests, pipelines excepted
    (docs/pipelines.md is their reference)."""
    import typing

    from pydantic import BaseModel

    from gateway.tenancy.pipelines import PipelineConfig

    if model in seen or model is PipelineConfig:
        return set()
    seen.add(model)
    found = set()
    for name, field in model.model_fields.items():
        found.add((model.__name__, name))
        stack = [field.annotation]
        while stack:
            hint = stack.pop()
            if isinstance(hint, type) and issubclass(hint, BaseModel):
                found |= _fields(hint, seen)
            stack.extend(typing.get_args(hint))
    return found


def test_the_tenant_file_reference_validates_and_names_every_key():
    import re

    import yaml

    from gateway.tenancy.config import TenantConfig

    reference = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    document = yaml.safe_load(re.search(r"```yaml\n(.*?)```", reference, re.S).group(1))
    document["api_keys"][0]["sha256"] = "a" * 64  # the reference shows a placeholder
    config = TenantConfig.model_validate(document)
    assert config.router.default == "federated" and config.limits.max_running == 2
    missing = sorted(f"{model}.{name}" for model, name in _fields(TenantConfig, set())
                     if name not in _keys(document))
    assert missing == [], f"docs/configuration.md does not show: {', '.join(missing)}"


def test_a_collection_indexes_auto_unless_it_names_an_index(tmp_path):
    from gateway.storage.indexes import DenseIndex, DenseIndexKind

    (tmp_path / "acme.yaml").write_text(TENANT % "{trust_tier: first-party}")
    photos = load_tenants(tmp_path)["acme"].namespaces["media"].collections["photos"]
    assert photos.index.policy() == DenseIndex()
    (tmp_path / "acme.yaml").write_text(TENANT % "{trust_tier: first-party, index: {dense: hnsw_sq, ef: 128, m: 32}}")
    policy = load_tenants(tmp_path)["acme"].namespaces["media"].collections["photos"].index.policy()
    assert (policy.kind, policy.ef, policy.m) == (DenseIndexKind.HNSW_SQ, 128, 32)


def test_a_dumped_tenant_config_validates_again_with_every_index_kind(tmp_path):
    from gateway.tenancy.config import TenantConfig

    # model_dump() writes every index setting, those the kind does not read included, at their defaults.
    for index in ("{}", "{dense: flat}", "{dense: hnsw, ef: 32}", "{dense: ivf_sq8, nprobe: 8}"):
        (tmp_path / "acme.yaml").write_text(TENANT % f"{{trust_tier: first-party, index: {index}}}")
        config = load_tenants(tmp_path)["acme"]
        assert TenantConfig.model_validate(config.model_dump()) == config


@pytest.mark.parametrize("index, message", [
    ("{dense: annoy}", "index.dense: Input should be 'auto', 'flat', 'hnsw', 'hnsw_sq', 'ivf_flat' or 'ivf_sq8'; "
                       "got 'annoy'"),
    ("{dense: hnsw, nprobe: 8}", "dense 'hnsw' does not read nprobe; it reads: m, ef_construction, ef"),
    ("{dense: flat, ef: 8}", "dense 'flat' does not read ef; it reads: no parameters"),
    ("{dense: ivf_sq8, auto_rows: 10}", "dense 'ivf_sq8' does not read auto_rows; it reads: nlist, nprobe"),
    ("{dense: ivf_flat, nlist: 16, nprobe: 32}", "nprobe 32 is more than nlist 16; allowed: 1 to 16"),
    ("{dense: hnsw, ef: 0}", "index.ef: Input should be greater than or equal to 1; got 0"),
    ("{dense: auto, sq_type: SQ8}", "unknown key 'sq_type'"),
])
def test_an_index_setting_that_cannot_apply_is_refused_at_load(tmp_path, index, message):
    found = problems(tmp_path, "{trust_tier: first-party, index: %s}" % index)
    assert any("namespaces.media.collections.photos" in p and message in p for p in found), found
# -- trust_by: a record's trust tier from its metadata ------------------------------------------

def test_trust_by_maps_metadata_values_to_tiers_under_the_collection_tier():
    from gateway.tenancy.config import CollectionConfig, TrustTier

    config = CollectionConfig(trust_tier="partner", trust_by={
        "field": "origin", "tiers": {"forum": "user-generated", "vendor": "third-party", "true": "third-party"}})
    assert config.record_tier({"origin": "forum"}) is TrustTier.USER_GENERATED
    assert config.record_tier({"origin": True}) is TrustTier.THIRD_PARTY  # booleans by their JSON text
    # Missing, unmapped or non-scalar values take the collection's tier: it is the default.
    assert config.record_tier({}) is TrustTier.PARTNER
    assert config.record_tier({"origin": "staff"}) is TrustTier.PARTNER
    assert config.record_tier({"origin": ["forum"]}) is TrustTier.PARTNER
    assert CollectionConfig(trust_tier="partner").record_tier({"origin": "forum"}) is TrustTier.PARTNER
    # Collection configs are hashed (a CollectionRef is a set member and a dict key).
    same = CollectionConfig(trust_tier="partner", trust_by={"field": "origin", "tiers": {
        "true": "third-party", "vendor": "third-party", "forum": "user-generated"}})
    assert hash(config) == hash(same) and len({config, same}) == 1


@pytest.mark.parametrize(("trust_by", "message"), [
    ("{field: origin, tiers: {staff: first-party}}",
     "trust_by.tiers maps 'staff' to 'first-party', above the collection's trust_tier 'partner'.*"
     "allowed: partner, third-party, user-generated"),
    ("{field: origin, tiers: {}}", "trust_by.tiers is empty"),
    ("{field: origin, tiers: {forum: anonymous}}", "'first-party', 'partner', 'third-party' or 'user-generated'"),
    ("{field: 'bad key', tiers: {forum: user-generated}}", "'bad key' is not a valid name"),
])
def test_trust_by_refuses_a_tier_above_the_collection_and_unknown_tiers(tmp_path, trust_by, message):
    found = problems(tmp_path, "{trust_tier: partner, trust_by: %s}" % trust_by)
    assert found and any(re.search(message, p) for p in found), found
# -- language and the default filter -------------------------------------------------------------

def test_collections_analyse_english_unless_they_declare_a_language(tmp_path):
    from gateway.storage.analyzer import Language

    (tmp_path / "acme.yaml").write_text(TENANT % "{trust_tier: first-party}")
    assert load_tenants(tmp_path)["acme"].namespaces["media"].collections["photos"].language is Language.EN
    for code in ("de", "fr", "es", "it", "nl", "pt", "sv", "ru", "none"):
        (tmp_path / "acme.yaml").write_text(TENANT % f"{{trust_tier: first-party, language: {code}}}")
        assert load_tenants(tmp_path)["acme"].namespaces["media"].collections["photos"].language == code


def test_a_language_the_analyzer_lacks_is_refused_naming_the_allowed_set(tmp_path):
    found = problems(tmp_path, "{trust_tier: first-party, language: german}")
    assert any("namespaces.media.collections.photos.language" in p and "Input should be 'en', 'de', 'fr', 'es', "
               "'it', 'nl', 'pt', 'sv', 'ru' or 'none'; got 'german'" in p for p in found), found


def test_a_default_filter_is_read_as_a_filter(tmp_path):
    from gateway.storage.filters import And, Condition, Op

    (tmp_path / "acme.yaml").write_text(TENANT % (
        "{trust_tier: first-party, metadata_fields: [lang, draft], search: {filter: {and: ["
        "{field: metadata.lang, op: eq, value: en}, {field: metadata.draft, op: exists, value: false}]}}}"))
    photos = load_tenants(tmp_path)["acme"].namespaces["media"].collections["photos"]
    assert photos.default_filter == And((Condition("metadata.lang", Op.EQ, "en"),
                                         Condition("metadata.draft", Op.EXISTS, False)))
    assert hash(photos) == hash(photos.model_copy())
    (tmp_path / "acme.yaml").write_text(TENANT % "{trust_tier: first-party}")
    assert load_tenants(tmp_path)["acme"].namespaces["media"].collections["photos"].default_filter is None


@pytest.mark.parametrize(("search", "message"), [
    ("{filter: {field: metadata.lang, op: eq, value: en}}",
     "search.filter: filter field 'metadata.lang' is not filterable here; allowed: chunk_id, "),
    ("{filter: {field: title, op: exists, value: true}}",
     "search.filter: operator 'exists' does not apply to 'title' (a text field); allowed on it: contains, "),
    ("{filter: {field: title, op: like, value: x}}", "search.filter: filter operator 'like' is unknown; "),
    ("{filter: {field: created_at, op: gte, value: '2026-03-01T10:00'}}",
     "search.filter: filter field 'created_at' cannot be compared with '2026-03-01T10:00'"),
    ("{filter: {and: []}}", "search.filter: 'and' needs at least one condition"),
    ("{filter: {where: x}}", "search.filter: a filter node must be exactly one of"),
])
def test_a_default_filter_the_collection_cannot_run_is_refused_at_load(tmp_path, search, message):
    found = problems(tmp_path, f"{{trust_tier: first-party, search: {search}}}")
    assert any("namespaces.media.collections.photos" in p and message in p for p in found), found
