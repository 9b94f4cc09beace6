"""deploy/: every manifest parses, and its ports, probe paths and GATEWAY_* names match the code.

No Docker or cluster here: the files are read as YAML (and the Dockerfile as text) and checked
against gateway/settings.py, the app's routes and the tenant models.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from starlette.routing import Route

from gateway.app import create_app
from gateway.settings import Settings
from gateway.tenancy.config import TenantConfig

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
K8S = DEPLOY / "k8s"
SETTINGS = Settings()
GATEWAY_NAMES = {f"GATEWAY_{name.upper()}" for name in Settings.model_fields}
_GATEWAY_NAME = re.compile(r"\bGATEWAY_[A-Z0-9_]+\b")


def _documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def _k8s(kind: str) -> dict:
    found = [doc for path in sorted(K8S.glob("*.yaml")) for doc in _documents(path) if doc.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind} in {K8S}, found {len(found)}"
    return found[0]


def _routes() -> set[str]:
    return {route.path for route in create_app(SETTINGS).routes if isinstance(route, Route)}


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) per Dockerfile instruction, continuation lines joined."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    joined = re.sub(r"\\\n", " ", text)
    lines = [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


@pytest.mark.parametrize("path", sorted(p.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("*.yaml")))
def test_every_yaml_file_parses(path):
    documents = _documents(DEPLOY / path)
    assert documents and all(isinstance(doc, dict) for doc in documents)


def test_every_gateway_variable_anywhere_in_deploy_is_a_setting():
    used: dict[str, set[str]] = {}
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            for name in _GATEWAY_NAME.findall(path.read_text(encoding="utf-8")):
                used.setdefault(name, set()).add(path.relative_to(DEPLOY).as_posix())
    unknown = {name: sorted(files) for name, files in used.items() if name not in GATEWAY_NAMES}
    assert not unknown, f"not settings in gateway/settings.py: {unknown}"
    assert {"GATEWAY_MILVUS_URI", "GATEWAY_MILVUS_TOKEN", "GATEWAY_TENANTS_DIR"} <= set(used)


# Files of Milvus's own that comments in deploy/ refer to; every other file a comment names is ours.
_MILVUS_FILES = {"milvus.yaml", "milvus-standalone-docker-compose.yml", "/milvus/configs/user.yaml"}


def test_every_file_a_deploy_comment_names_exists():
    """A comment that sends the reader to `secret-api-keys.yaml` when the file is secret.example.yaml is drift."""
    named: dict[str, set[str]] = {}
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                for name in re.findall(r"[\w./-]+\.(?:ya?ml|md|py|json)\b", line.partition("#")[2]):
                    named.setdefault(name, set()).add(path.relative_to(DEPLOY).as_posix())
    missing = {name: sorted(where) for name, where in named.items() if name not in _MILVUS_FILES
               and not any((base / name).exists() for base in (DEPLOY.parent, DEPLOY, K8S))}
    assert named and not missing, f"comments in deploy/ name files that do not exist: {missing}"


def test_the_dockerfile_is_multi_stage_non_root_and_probes_a_real_route():
    instructions = _dockerfile()
    stages = [args for op, args in instructions if op == "FROM"]
    assert len(stages) >= 2 and any("AS runtime" in s for s in stages)
    user = [args for op, args in instructions if op == "USER"][-1]
    assert user.split(":")[0] not in ("root", "0")
    assert [args for op, args in instructions if op == "EXPOSE"] == [str(SETTINGS.port)]
    healthcheck = next(args for op, args in instructions if op == "HEALTHCHECK")
    path = re.search(r"/(readyz|healthz)\b", healthcheck)
    assert path and path.group(0) in _routes()
    env = " ".join(args for op, args in instructions if op == "ENV")
    assert f"GATEWAY_PORT={SETTINGS.port}" in env and "GATEWAY_HOST=0.0.0.0" in env
    # The model is installed in the build stage and copied; nothing fetches it when the container runs.
    assert any(op == "COPY" and "--from=build" in args for op, args in instructions)
    assert shlex.split([args for op, args in instructions if op == "CMD"][-1].strip("[]").replace(",", " ")) \
        == ["gateway", "serve"]


def test_the_compose_file_runs_two_gateways_on_milvus_standalone_2_5():
    compose = _documents(DEPLOY / "compose.yaml")[0]
    services = compose["services"]
    gateways = {name: svc for name, svc in services.items() if svc.get("image", "").startswith("retrieval-gateway")}
    assert len(gateways) == 2
    milvus = services["milvus"]
    assert milvus["command"] == ["milvus", "run", "standalone"]
    assert _release(milvus["image"]) >= (2, 5)
    for svc in services.values():
        assert ":" in svc["image"] and not svc["image"].endswith(":latest"), svc["image"]
    for name, svc in gateways.items():
        env = svc["environment"]
        assert env["GATEWAY_MILVUS_URI"] == "http://milvus:19530"
        assert "GATEWAY_MILVUS_TOKEN" in env
        assert [p.split(":")[-1] for p in svc["ports"]] == [env["GATEWAY_PORT"]] == [str(SETTINGS.port)]
        mounts = [v for v in svc["volumes"] if v.split(":")[1] == env["GATEWAY_TENANTS_DIR"]]
        assert mounts and mounts[0].endswith(":ro"), f"{name}: tenants must be mounted read-only"
        assert svc["depends_on"]["milvus"]["condition"] == "service_healthy"
    seeding = [name for name, svc in gateways.items() if svc["environment"]["GATEWAY_INGEST_DEMO_ON_START"] == "true"]
    assert len(seeding) == 1, "exactly one replica seeds the demo corpora"


def test_the_deployment_probes_real_routes_on_the_settings_port():
    deployment = _k8s("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert ports == {"http": SETTINGS.port} and env["GATEWAY_PORT"] == str(SETTINGS.port)
    routes = _routes()
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] in routes
    assert {"/readyz", "/healthz"} <= routes
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[env["GATEWAY_TENANTS_DIR"]]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    tenants_volume = volumes[mounts[env["GATEWAY_TENANTS_DIR"]]["name"]]
    assert tenants_volume["configMap"]["name"] == _k8s("ConfigMap")["metadata"]["name"]
    assert container["envFrom"][0]["secretRef"]["name"] == _example_secret()["metadata"]["name"]


def test_service_and_hpa_point_at_the_deployment():
    deployment, service, hpa = _k8s("Deployment"), _k8s("Service"), _k8s("HorizontalPodAutoscaler")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == deployment["spec"]["template"]["spec"]["containers"][0][
        "ports"][0]["name"]
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    kustomization = _documents(K8S / "kustomization.yaml")[0]
    assert "secret.example.yaml" not in kustomization["resources"]  # placeholders are never applied
    assert all((K8S / r).is_file() for r in kustomization["resources"])


def test_the_tenant_configmap_validates_and_its_key_variables_come_from_the_secret():
    tenants = [TenantConfig.model_validate(yaml.safe_load(text)) for text in _k8s("ConfigMap")["data"].values()]
    secret = _example_secret()["stringData"]
    referenced = {key.env for tenant in tenants for key in tenant.api_keys if key.env}
    assert referenced and referenced <= set(secret)
    assert {"GATEWAY_MILVUS_TOKEN", "GATEWAY_METRICS_TOKEN"} <= set(secret)


def test_the_milvus_chart_values_ask_for_a_2_5_cluster_with_authentication():
    values = _documents(K8S / "milvus-values.yaml")[0]
    assert values["cluster"]["enabled"] is True
    assert _release(f"x:{values['image']['all']['tag']}") >= (2, 5)
    user = yaml.safe_load(values["extraConfigFiles"]["user.yaml"])
    assert user["common"]["security"]["authorizationEnabled"] is True
    assert yaml.safe_load((DEPLOY / "milvus-user.yaml").read_text())["common"]["security"]["authorizationEnabled"]


def _example_secret() -> dict:
    return _documents(K8S / "secret.example.yaml")[0]


def _release(image: str) -> tuple[int, int]:
    match = re.search(r":v?(\d+)\.(\d+)", image)
    assert match, f"{image} is not pinned to a release"
    return int(match.group(1)), int(match.group(2))
