from pathlib import Path

import pytest

from gateway.errors import ConfigError, UnknownCollection, UnknownNamespace
from gateway.tenancy.config import TrustTier
from gateway.tenancy.loader import load_tenants, read_tenants
from gateway.tenancy.registry import TenantRegistry

GOOD = """
id: acme
api_keys:
  - {sha256: "%s", role: reader}
  - {env: ACME_ADMIN_KEY, role: admin}
namespaces:
  product-docs:
    collections:
      docs: {trust_tier: first-party, mode: hybrid, fusion: rrf, limit: 8}
      tickets: {trust_tier: third-party, mode: sparse}
""" % ("a" * 64)


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def test_valid_tenant_loads(tmp_path):
    write(tmp_path, "acme.yaml", GOOD)
    tenants = load_tenants(tmp_path)
    docs = tenants["acme"].namespaces["product-docs"].collections["docs"]
    assert docs.trust_tier is TrustTier.FIRST_PARTY and docs.limit == 8


def test_every_problem_is_reported_with_file_and_key(tmp_path):
    write(tmp_path, "bad.yaml", """
id: Bad Tenant
api_keys:
  - {key: plain-text-key}
namespaces:
  docs:
    collections:
      guides: {mode: semantic}
""")
    write(tmp_path, "broken.yaml", "id: [unclosed")
    _, problems = read_tenants(tmp_path)
    rendered = [str(p) for p in problems]
    assert any("bad.yaml: id:" in r and "'Bad Tenant' is not a valid name" in r for r in rendered)
    assert any("api_keys.0.key: unknown key" in r for r in rendered)
    assert any("namespaces.docs.collections.guides.trust_tier: required key is missing" in r for r in rendered)
    assert any("guides.mode: Input should be 'dense', 'sparse' or 'hybrid'; got 'semantic'" in r for r in rendered)
    assert any("broken.yaml" in r and "not valid YAML" in r for r in rendered)
    with pytest.raises(ConfigError, match="problem"):
        load_tenants(tmp_path)


def test_duplicate_tenant_ids_are_refused(tmp_path):
    write(tmp_path, "a.yaml", GOOD)
    write(tmp_path, "b.yaml", GOOD)
    _, problems = read_tenants(tmp_path)
    assert [p.key for p in problems] == ["id"] and "already defined" in problems[0].message


def test_registry_errors_name_value_and_allowed_set(tmp_path):
    write(tmp_path, "acme.yaml", GOOD)
    registry = TenantRegistry(load_tenants(tmp_path))
    assert registry.resolve("acme", "docs").scope.namespace == "product-docs"
    with pytest.raises(UnknownCollection, match="collection 'tikets' is not in tenant 'acme'; known: docs, tickets"):
        registry.resolve("acme", "tikets")
    with pytest.raises(UnknownNamespace, match="namespace 'nope' is not in tenant 'acme'; known: product-docs"):
        registry.resolve("acme", "docs", namespace="nope")
    assert [r.label for r in registry.collections("acme")] == ["product-docs/docs", "product-docs/tickets"]


def test_shipped_tenant_files_are_valid():
    root = Path(__file__).resolve().parents[2]
    for directory in (root / "tenants", root / "docs" / "examples"):
        if any(directory.glob("*.yaml")):
            tenants, problems = read_tenants(directory)
            assert problems == [], directory


ENTRY_POINTS = """
id: acme
namespaces:
  help:
    collections:
      faq: {trust_tier: partner, retriever: "tests.retrieval.faq_retriever:wrong_arity"}
      gone: {trust_tier: partner, retriever: "tests.retrieval.nowhere:lookup"}
hooks:
  subscribers: ["tests.retrieval.faq_retriever:missing"]
pipelines:
  rewrite:
    stages:
      - customQuery: {function: "tests.retrieval.stages.sample_stages:wrong_shape"}
"""


def test_entry_points_that_cannot_load_are_problems_with_their_keys(tmp_path, monkeypatch, capsys):
    write(tmp_path, "acme.yaml", ENTRY_POINTS)
    tenants, problems = read_tenants(tmp_path)
    assert tenants == {}
    found = {p.key: p.message for p in problems}
    assert "must accept (request)" in found["namespaces.help.collections.faq.retriever"]
    assert "cannot import module 'tests.retrieval.nowhere'" in found["namespaces.help.collections.gone.retriever"]
    assert "is not a callable" in found["hooks.subscribers.0"]
    assert "must accept (question, queries, params)" in found["pipelines.rewrite.stages.0.customQuery.function"]
    # `gateway check-config` reads tenants the same way, so it prints the same problems.
    from gateway.cli import main
    monkeypatch.setenv("GATEWAY_TENANTS_DIR", str(tmp_path))
    assert main(["check-config"]) == 1
    assert "acme.yaml: namespaces.help.collections.faq.retriever: retriever" in capsys.readouterr().out


def test_tool_prefixes_are_unique_and_custom_collections_take_no_seed(tmp_path):
    write(tmp_path, "acme.yaml", """
id: acme
namespaces:
  help:
    collections:
      docs: {trust_tier: first-party, tool_prefix: help}
      faq: {trust_tier: partner, tool_prefix: help, retriever: "tests.retrieval.faq_retriever:lookup"}
""")
    assert "tool_prefix 'help' is already used by help/docs" in str(read_tenants(tmp_path)[1])
    write(tmp_path, "acme.yaml", """
id: acme
namespaces:
  help:
    collections:
      faq: {trust_tier: partner, retriever: "tests.retrieval.faq_retriever:lookup"}
seed: [{namespace: help, collection: faq, paths: [x]}]
""")
    assert "served by the custom retriever" in str(read_tenants(tmp_path)[1])


def test_an_allow_list_without_a_manifest_is_a_problem(tmp_path):
    write(tmp_path, "acme.yaml", GOOD + "operations: {allow_only_listed: true}\n")
    _, problems = read_tenants(tmp_path)
    assert [p.key for p in problems] == ["operations"]
    assert "allow_only_listed needs a 'manifest'" in problems[0].message
    write(tmp_path, "acme.yaml", GOOD + "operations: {manifest: ops.json, allow_only_listed: true}\n")
    assert load_tenants(tmp_path)["acme"].operations.manifest == "ops.json"


def test_a_typo_in_a_key_lists_the_allowed_keys_and_suggests_the_nearest(tmp_path):
    write(tmp_path, "acme.yaml", GOOD.replace("limit: 8", "limt: 8"))
    _, problems = read_tenants(tmp_path)
    [problem] = [str(p) for p in problems]
    assert "namespaces.product-docs.collections.docs.limt: unknown key 'limt'" in problem
    assert "allowed keys: alpha, candidates, chunking," in problem and "trust_tier" in problem
    assert problem.endswith("did you mean 'limit'?")


def test_a_typo_at_the_top_level_and_in_an_enum_value_is_suggested(tmp_path):
    write(tmp_path, "acme.yaml", GOOD.replace("namespaces:", "federaton: {merge: rrf}\nnamespaces:")
          .replace("mode: sparse", "mode: sprase"))
    _, problems = read_tenants(tmp_path)
    rendered = "\n".join(str(p) for p in problems)
    assert "federaton: unknown key 'federaton'" in rendered and "did you mean 'federation'?" in rendered
    assert "tickets.mode: Input should be 'dense', 'sparse' or 'hybrid'; got 'sprase'; did you mean 'sparse'?" \
        in rendered


def test_a_missing_trust_tier_lists_the_tiers(tmp_path):
    write(tmp_path, "acme.yaml", GOOD.replace("trust_tier: third-party, ", ""))
    _, problems = read_tenants(tmp_path)
    [problem] = [str(p) for p in problems]
    assert problem.endswith("tickets.trust_tier: required key is missing; "
                            "allowed: first-party, partner, third-party, user-generated")


def test_a_limit_above_the_maximum_is_refused_at_load(tmp_path):
    write(tmp_path, "acme.yaml", GOOD.replace("limit: 8", "limit: 500"))
    assert read_tenants(tmp_path)[1] == []  # without a maximum, 1000 is the model's own bound
    _, problems = read_tenants(tmp_path, max_limit=100)
    [problem] = [str(p) for p in problems]
    assert "docs.limit: limit 500 is above GATEWAY_MAX_LIMIT 100; allowed: 1 to 100" in problem
    with pytest.raises(ConfigError, match="GATEWAY_MAX_LIMIT"):
        load_tenants(tmp_path, max_limit=100)


def test_one_tenant_file_can_be_read_on_its_own(tmp_path):
    good = write(tmp_path, "acme.yaml", GOOD)
    write(tmp_path, "other.yaml", "id: [broken")
    tenants, problems = read_tenants(good)
    assert list(tenants) == ["acme"] and problems == []


# -- parsed files kept between runs ----------------------------------------------------------------

def _fresh_process(monkeypatch):
    """What a new process starts with: nothing remembered in memory."""
    from gateway.tenancy import loader

    monkeypatch.setattr(loader, "_READ", {})


def _tenant_file(path, tier="first-party", description="plain"):
    temporary = path.with_suffix(".tmp")
    temporary.write_text(f"id: {path.stem}\ndescription: {description}\nnamespaces:\n  docs:\n    collections:\n"
                         f"      faq: {{trust_tier: {tier}}}\n")
    temporary.replace(path)


def test_a_restart_parses_only_the_files_that_changed(tmp_path, monkeypatch):
    import yaml

    from gateway.tenancy import parsing
    from gateway.tenancy.loader import ParsedFiles, load_tenants

    directory = tmp_path / "tenants"
    directory.mkdir()
    for name in ("acme", "globex"):
        _tenant_file(directory / f"{name}.yaml")
    cache = tmp_path / "store.tenants.json"
    _fresh_process(monkeypatch)
    load_tenants(directory, parsed=ParsedFiles(cache))
    parsed = []
    real = yaml.load
    monkeypatch.setattr(parsing.yaml, "load", lambda text, Loader: parsed.append(text) or real(text, Loader=Loader))
    _tenant_file(directory / "globex.yaml", tier="partner")
    _fresh_process(monkeypatch)
    tenants = load_tenants(directory, parsed=ParsedFiles(cache))
    assert len(parsed) == 1 and "partner" in parsed[0]
    assert tenants["globex"].namespaces["docs"].collections["faq"].trust_tier == "partner"
    assert tenants["acme"].namespaces["docs"].collections["faq"].trust_tier == "first-party"


def test_a_cached_file_validates_as_a_parsed_one(tmp_path, monkeypatch):
    from gateway.tenancy.loader import ParsedFiles, read_tenant_files

    directory = tmp_path / "tenants"
    directory.mkdir()
    _tenant_file(directory / "acme.yaml", tier="sekret")
    _tenant_file(directory / "dated.yaml", description="2024-01-01")  # YAML reads a date: not cached
    cache = tmp_path / "store.tenants.json"
    results = []
    for _ in range(2):
        _fresh_process(monkeypatch)
        _, _, problems = read_tenant_files(directory, parsed=ParsedFiles(cache))
        results.append(sorted(str(p) for p in problems))
    assert results[0] == results[1] and len(results[0]) == 2
    assert "dated.yaml" not in cache.read_text()


def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path, monkeypatch):
    from gateway.tenancy.loader import ParsedFiles, load_tenants

    directory = tmp_path / "tenants"
    directory.mkdir()
    _tenant_file(directory / "acme.yaml")
    cache = tmp_path / "store.tenants.json"
    cache.write_text("{not json")
    _fresh_process(monkeypatch)
    assert "acme" in load_tenants(directory, parsed=ParsedFiles(cache))
    assert '"format": 1' in cache.read_text()


# -- many files parsed across processes --------------------------------------------------------------

def _many(directory, count):
    directory.mkdir()
    for i in range(count):
        _tenant_file(directory / f"t{i:04d}.yaml", tier=("first-party", "partner")[i % 2])
    (directory / "t0003.yaml").write_text("id: [broken")
    (directory / "t0004.yaml").write_text("id: t0004\nnamespaces:\n  docs:\n    collections:\n      faq: {trust_tier: sekret}\n")
    (directory / "t0005.yaml").write_bytes(b"id: \xff\xfe\n")


def test_files_parsed_by_child_processes_read_as_parsed_here(tmp_path, monkeypatch):
    from gateway.tenancy import loader, parsing
    from gateway.tenancy.loader import read_tenant_files

    directory = tmp_path / "tenants"
    _many(directory, 60)
    monkeypatch.setattr(loader, "PARALLEL_MIN_FILES", 1)
    spawned = []
    real_run = parsing.subprocess.run
    monkeypatch.setattr(parsing.subprocess, "run", lambda *a, **k: spawned.append(a) or real_run(*a, **k))
    monkeypatch.setattr(parsing, "_cpus", lambda: 3)
    here = []
    real_parse = parsing.parse_file
    for module in (parsing, loader):  # the children's share is not parsed here again
        monkeypatch.setattr(module, "parse_file", lambda path: here.append(path) or real_parse(path))
    _fresh_process(monkeypatch)
    tenants, origins, problems = read_tenant_files(directory)
    assert len(spawned) == 2 and len(here) == 20  # two children and this process, a third of the files each
    monkeypatch.setattr(loader, "PARALLEL_MIN_FILES", 10**9)
    _fresh_process(monkeypatch)
    alone = read_tenant_files(directory)
    assert (tenants, origins, [str(p) for p in problems]) == (alone[0], alone[1], [str(p) for p in alone[2]])
    assert len(tenants) == 57 and {str(p).split(":")[0] for p in problems} == {
        str(directory / f"t000{i}.yaml") for i in (3, 4, 5)}
    assert any("not valid YAML" in str(p) for p in problems) and any("cannot be read" in str(p) for p in problems)


def test_a_child_that_fails_leaves_its_files_to_this_process(tmp_path, monkeypatch):
    from gateway.tenancy import loader, parsing
    from gateway.tenancy.loader import read_tenant_files

    directory = tmp_path / "tenants"
    _many(directory, 20)
    monkeypatch.setattr(loader, "PARALLEL_MIN_FILES", 1)
    monkeypatch.setattr(parsing, "_cpus", lambda: 2)
    monkeypatch.setattr(parsing.sys, "executable", str(tmp_path / "no-such-python"))
    _fresh_process(monkeypatch)
    tenants, _, problems = read_tenant_files(directory)
    assert len(tenants) == 17 and len(problems) == 3
