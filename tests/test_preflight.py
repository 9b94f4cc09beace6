"""Every configuration mistake that stops `gateway serve` is reported by `gateway check-config` with
the same message, all of them in one run; `serve` refuses with that message and exit 3, no traceback."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main

KEY = "a" * 64
TENANT = f"""
id: acme
api_keys:
  - {{sha256: "{KEY}", role: reader}}
namespaces:
  support:
    collections:
      docs: {{trust_tier: first-party}}
seed:
  - {{namespace: support, collection: docs, paths: [corpus]}}
"""
UNSEEDED = TENANT.split("seed:")[0]
ENV_KEYED = TENANT.replace("role: reader}", "role: reader}\n  - {env: PREFLIGHT_UNSET, role: admin}")
OTHER = TENANT.replace("id: acme", "id: globex").replace(KEY, "b" * 64)
RERANK_HTTP = """
pipelines:
  remote:
    stages:
      - rerank: {chain: [{http: {url: "http://127.0.0.1:9/rerank", apiKeyEnv: PREFLIGHT_RERANK_KEY}}]}
"""


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    tenants = tmp_path / "tenants"
    (tenants / "corpus").mkdir(parents=True)
    (tenants / "corpus" / "refunds.md").write_text("# Refunds\n\nRefunds take five days.\n")
    (tenants / "acme.yaml").write_text(TENANT)
    (tenants / "globex.yaml").write_text(OTHER)
    for name in [n for n in os.environ if n.startswith("GATEWAY_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GATEWAY_TENANTS_DIR", str(tenants))
    monkeypatch.setenv("GATEWAY_MILVUS_URI", str(tmp_path / "data" / "gateway.db"))
    return tenants


def _acme(tenants: Path, text: str) -> Path:
    (tenants / "acme.yaml").write_text(text)
    return tenants / "acme.yaml"


# Each class of mistake start-up refuses: (how to make it, the line check-config prints for it).
# Whatever `f(tenants)` returns is the line; the message after the key is start-up's own.
CASES = {
    "bad YAML": lambda t: f"{_acme(t, 'id: [unclosed')}: <root>: not valid YAML: ",
    "unknown key": lambda t: f"{_acme(t, TENANT.replace('first-party}', 'first-party, limt: 8}'))}: "
                             "namespaces.support.collections.docs.limt: unknown key 'limt' (value 8); allowed keys: ",
    "bad trust tier": lambda t: f"{_acme(t, TENANT.replace('first-party', 'secret'))}: "
                                "namespaces.support.collections.docs.trust_tier: Input should be 'first-party', "
                                "'partner', 'third-party' or 'user-generated'; got 'secret'",
    "missing trust tier": lambda t: f"{_acme(t, TENANT.replace('{trust_tier: first-party}', '{mode: dense}'))}: "
                                    "namespaces.support.collections.docs.trust_tier: required key is missing; "
                                    "allowed: first-party, partner, third-party, user-generated",
    "duplicate tenant": lambda t: (t / "globex.yaml").write_text(TENANT) and
                                  f"{t / 'globex.yaml'}: id: tenant 'acme' is already defined in {t / 'acme.yaml'}",
    "key of two tenants": lambda t: (t / "globex.yaml").write_text(OTHER.replace("b" * 64, KEY)) and
                                    f"{t / 'globex.yaml'}: api_keys: tenant 'globex' api_keys[0] is also a key of "
                                    "tenant 'acme' (role 'reader'); a key must identify exactly one tenant and role",
    "unset env key": lambda t: f"{_acme(t, ENV_KEYED)}: "
                               "api_keys.1: tenant 'acme' api_keys[1] refers to environment variable 'PREFLIGHT_UNSET', "
                               "which is not set",
    "missing seed path": lambda t: f"{_acme(t, TENANT.replace('[corpus]', '[corpus, nowhere]'))}: seed.0.paths: "
                                   f"cannot ingest '{t / 'nowhere'}': no such file or directory",
    "limit above GATEWAY_MAX_LIMIT": lambda t: f"{_acme(t, TENANT.replace('first-party}', 'first-party, limit: 500}'))}: "
                                               "namespaces.support.collections.docs.limit: limit 500 is above "
                                               "GATEWAY_MAX_LIMIT 100; allowed: 1 to 100",
    "route to no collection": lambda t: f"{_acme(t, TENANT + 'router: {default: tikets}')}: router.default: "
                                        "router.default names route 'tikets', which is not a collection of tenant 'acme'",
    "entry point that does not import": lambda t: f"{_acme(t, UNSEEDED.replace('first-party}', 'first-party, retriever: nowhere_mod:find}'))}: "
                                                  "namespaces.support.collections.docs.retriever: retriever "
                                                  "'nowhere_mod:find': cannot import module 'nowhere_mod'",
    "unset llm key": lambda t: f"{_acme(t, TENANT + 'llm: {base_url: http://127.0.0.1:9/v1, model: m, api_key_env: PREFLIGHT_LLM}')}: "
                               "llm.api_key_env: tenant 'acme' llm reads its API key from $PREFLIGHT_LLM, which is not set",
    "unset webhook secret": lambda t: f"{_acme(t, TENANT + 'hooks: {webhook: {url: http://127.0.0.1:9/h, secret_env: PREFLIGHT_HOOK}}')}: "
                                      "hooks.webhook.secret_env: tenant 'acme' hooks.webhook reads its signing secret "
                                      "from $PREFLIGHT_HOOK, which is not set",
    "unset rerank key": lambda t: f"{_acme(t, TENANT + RERANK_HTTP)}: pipelines.remote.stages.0.rerank.chain.0: "
                                  "tenant 'acme' pipeline 'remote' stages[0] (rerank).chain[0] reads its API key from "
                                  "$PREFLIGHT_RERANK_KEY, which is not set",
    "missing operation manifest": lambda t: f"{_acme(t, TENANT + 'operations: {manifest: ops.json}')}: "
                                            f"operations.manifest: operation manifest {t / 'ops.json'} cannot be read: ",
    "limits against the settings": lambda t: f"{_acme(t, TENANT + 'limits: {max_cost: 200000}')}: limits: tenant 'acme' "
                                             "limits: cost_burst 100000 is below max_cost 200000",
    "partition key on milvus-lite": lambda t: _acme(t, TENANT + "isolation: partition_key") and
                                              "GATEWAY_MILVUS_URI: tenant 'acme' sets isolation: partition_key",
}
# Mistakes in the settings rather than a tenant file: (environment, the line).
SETTING_CASES = {
    "a setting that does not parse": ({"GATEWAY_MAX_LIMIT": "lots"},
                                      "GATEWAY_MAX_LIMIT: Input should be a valid integer, unable to parse string as "
                                      "an integer; got 'lots'"),
    "openai embedder without its URL": ({"GATEWAY_EMBEDDER": "openai", "GATEWAY_EMBEDDING_MODEL": "m",
                                         "GATEWAY_EMBEDDING_DIM": "8"},
                                        "GATEWAY_EMBEDDER: GATEWAY_EMBEDDER=openai needs GATEWAY_EMBEDDING_URL"),
    "workers on an embedded store": ({"GATEWAY_WORKERS": "2", "GATEWAY_LITE_SERVER": "false"},
                                     "GATEWAY_WORKERS: GATEWAY_WORKERS 2 needs one store all workers can reach"),
    "tenant key that is the platform key": ({"GATEWAY_PLATFORM_KEY_SHA256": KEY},
                                            "api_keys: tenant 'acme' api_keys[0] is the platform key; a tenant key "
                                            "must differ"),
}


def _serve(tenants: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A real `gateway serve`: it must refuse before serving, so it ends by itself."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    environ.update({"GATEWAY_TENANTS_DIR": str(tenants),
                    "GATEWAY_MILVUS_URI": str(tenants.parent / "data" / "gateway.db"), **env})
    return subprocess.run([str(Path(sys.executable).parent / "gateway"), "serve", "--port", "1"],
                          env=environ, capture_output=True, text=True, timeout=120)


def _assert_serve_refuses_with(tenants: Path, env: dict[str, str], line: str) -> None:
    done = _serve(tenants, env)
    assert done.returncode == 3, done.stderr[-3000:]
    assert done.stderr.startswith("gateway cannot start: "), done.stderr[-3000:]
    assert f"  {line}" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "serving" not in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("mistake", CASES)
def test_check_config_reports_what_serve_refuses_with_the_same_message(workspace, capsys, mistake):
    line = CASES[mistake](workspace)
    assert main(["check-config"]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert any(p.startswith(line) for p in printed), (line, printed)
    served = next(p for p in printed if p.startswith(line))
    _assert_serve_refuses_with(workspace, {}, served)


@pytest.mark.parametrize("mistake", SETTING_CASES)
def test_check_config_reports_settings_that_serve_refuses(workspace, capsys, monkeypatch, mistake):
    env, line = SETTING_CASES[mistake]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["check-config"]) == 1
    printed = capsys.readouterr().out.splitlines()
    served = next((p.strip() for p in printed if line in p), None)
    assert served is not None, (line, printed)
    _assert_serve_refuses_with(workspace, env, served)


def test_one_run_reports_every_mistake_of_a_file(workspace, capsys, monkeypatch):
    """Seven mistakes in one file (it took five runs to see them all): one run lists them all."""
    monkeypatch.delenv("PREFLIGHT_UNSET", raising=False)
    _acme(workspace, """
id: acme
api_keys:
  - {env: PREFLIGHT_UNSET, role: admin}
namespaces:
  support:
    collections:
      docs: {trust_tier: secret, limt: 8, pipeline: evidnce}
      tickets: {trust_tier: partner, mode: sprase, tool_prefix: help}
      faq: {trust_tier: partner, tool_prefix: help, limit: 500}
router: {default: nowhere}
pipelines:
  evidence: {stages: [{hyde: {}}]}
seed:
  - {namespace: support, collection: docs, paths: [nowhere]}
""")
    assert main(["check-config"]) == 1
    out = capsys.readouterr().out
    expected = ["docs.trust_tier: Input should be", "docs.limt: unknown key 'limt'", "tickets.mode: Input should be",
                "router.default: router.default names route 'nowhere'",
                "docs.pipeline: namespaces.support.collections.docs.pipeline names pipeline 'evidnce'",
                "pipelines.evidence.stages.0: pipelines.evidence.stages[0] (hyde) needs a language model",
                "faq.tool_prefix: namespaces.support.collections.faq.tool_prefix 'help' is already used by support/tickets",
                "faq.limit: limit 500 is above GATEWAY_MAX_LIMIT 100",
                "api_keys.0: tenant 'acme' api_keys[0] refers to environment variable 'PREFLIGHT_UNSET', which is not set",
                f"seed.0.paths: cannot ingest '{workspace / 'nowhere'}': no such file or directory"]
    missing = [e for e in expected if e not in out]
    assert not missing, out
    assert len(out.strip().splitlines()) == len(expected), out


def test_the_start_up_code_refuses_with_the_messages_check_config_prints(workspace):
    """The messages of the pre-check are those of the parts start-up builds, so the two cannot drift."""
    import yaml

    from gateway.admission.setup import limits_by_tenant
    from pydantic import ValidationError

    from gateway.errors import GatewayError
    from gateway.graphql.persisted import OperationList
    from gateway.hooks.delivery import TenantHooks
    from gateway.ingest.loaders import load_paths
    from gateway.ingest.seed import seed_paths
    from gateway.retrieval.llm import chat_client
    from gateway.retrieval.stages import StageServices, build_pipelines
    from gateway.settings import Settings
    from gateway.tenancy.auth import ApiKeyAuthenticator
    from gateway.tenancy.config import TenantConfig
    from gateway.tenancy.registry import TenantRegistry

    def tenant(text: str) -> TenantConfig:
        return TenantConfig.model_validate(yaml.safe_load(text))

    def refusal(build) -> str:
        with pytest.raises(GatewayError) as caught:
            build()
        return caught.value.message

    def printed(mistake: str) -> str:
        line = CASES[mistake](workspace)
        return line.split(": ", 2)[2]

    unset = tenant(ENV_KEYED)
    assert refusal(lambda: ApiKeyAuthenticator(TenantRegistry({"acme": unset}), {})) == printed("unset env key")
    llm = tenant(TENANT + "llm: {base_url: http://127.0.0.1:9/v1, model: m, api_key_env: PREFLIGHT_LLM}")
    assert refusal(lambda: chat_client(llm, {})) == printed("unset llm key")
    hooks = tenant(TENANT + "hooks: {webhook: {url: http://127.0.0.1:9/h, secret_env: PREFLIGHT_HOOK}}")
    assert refusal(lambda: TenantHooks(hooks, {})) == printed("unset webhook secret")
    rerank = tenant(TENANT + RERANK_HTTP)
    services = StageServices(store=None, embedder=None, tokens=None, environ={})  # type: ignore[arg-type]
    assert refusal(lambda: build_pipelines(rerank, services)) == printed("unset rerank key")
    limits = tenant(TENANT + "limits: {max_cost: 200000}")
    assert refusal(lambda: limits_by_tenant(Settings(), TenantRegistry({"acme": limits}))).startswith(
        printed("limits against the settings"))
    assert refusal(lambda: OperationList.load(workspace / "ops.json", only_listed=False)).startswith(
        printed("missing operation manifest"))
    seeded = tenant(TENANT.replace("[corpus]", "[corpus, nowhere]"))
    assert refusal(lambda: list(load_paths(seed_paths(workspace, seeded.seed[0])))) == printed("missing seed path")
    with pytest.raises(ValidationError) as caught:  # a tenant built anywhere else refuses with them all
        TenantConfig.model_validate(yaml.safe_load(TENANT + "router: {default: tikets}"))
    assert printed("route to no collection") in str(caught.value)


def test_late_interaction_with_an_openai_embedder_is_refused_as_the_pipeline_build_refuses_it(workspace, capsys,
                                                                                             monkeypatch):
    from gateway.embedding.base import CachedEmbedder
    from gateway.embedding.http import OpenAIEmbedder
    from gateway.errors import ConfigError
    from gateway.retrieval.stages import StageServices, build_pipelines
    from gateway.tenancy.loader import load_tenants

    env = {"GATEWAY_EMBEDDER": "openai", "GATEWAY_EMBEDDING_URL": "http://127.0.0.1:9/v1",
           "GATEWAY_EMBEDDING_MODEL": "m", "GATEWAY_EMBEDDING_DIM": "8"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    acme = _acme(workspace, TENANT + "pipelines: {deep: {stages: [{rerank: {chain: [{lateInteraction: {topK: 5}}]}}]}}")
    embedder = CachedEmbedder(OpenAIEmbedder("http://127.0.0.1:9/v1", "m", 8))  # built, never called
    services = StageServices(store=None, embedder=embedder, tokens=None, environ={})  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as caught:
        build_pipelines(load_tenants(workspace)["acme"], services)
    line = f"{acme}: pipelines.deep.stages.0.rerank.chain.0: {caught.value.message}"
    assert main(["check-config"]) == 1
    assert line in capsys.readouterr().out.splitlines()
    _assert_serve_refuses_with(workspace, env, line)
