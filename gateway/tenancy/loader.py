"""Load and validate tenants/*.yaml; every problem is reported with its file and key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from gateway.entry_points import entry_point_problems
from gateway.errors import ConfigError
from gateway.tenancy.config import TenantConfig


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    file: Path
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key or '<root>'}: {self.message}"


def read_tenants(directory: Path) -> tuple[dict[str, TenantConfig], list[ConfigProblem]]:
    """Every tenant file in `directory`, and every problem found (never stops at the first)."""
    tenants: dict[str, TenantConfig] = {}
    origins: dict[str, Path] = {}
    problems: list[ConfigProblem] = []
    if not directory.is_dir():
        return {}, [ConfigProblem(directory, "", "tenants directory does not exist (set GATEWAY_TENANTS_DIR)")]
    files = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    if not files:
        problems.append(ConfigProblem(directory, "", "no tenant files (*.yaml) found"))
    for path in files:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            problems.append(ConfigProblem(path, "", f"not valid YAML: {exc}"))
            continue
        if not isinstance(raw, dict):
            problems.append(ConfigProblem(path, "", f"expected a mapping at the top, got {type(raw).__name__}"))
            continue
        try:
            tenant = TenantConfig.model_validate(raw)
        except ValidationError as exc:
            problems.extend(_problems(path, exc))
            continue
        # Imported here so `check-config` reports them as start-up would (gateway/entry_points.py).
        broken = entry_point_problems(tenant)
        if broken:
            problems.extend(ConfigProblem(path, key, message) for key, message in broken)
            continue
        if tenant.id in tenants:
            problems.append(ConfigProblem(path, "id", f"tenant {tenant.id!r} is already defined in {origins[tenant.id]}"))
            continue
        tenants[tenant.id] = tenant
        origins[tenant.id] = path
    return tenants, problems


def load_tenants(directory: Path) -> dict[str, TenantConfig]:
    """Like read_tenants, but any problem is a ConfigError listing all of them."""
    tenants, problems = read_tenants(directory)
    if problems:
        listing = "\n".join(f"  {p}" for p in problems)
        raise ConfigError(f"{len(problems)} problem(s) in tenant configuration:\n{listing}")
    return tenants


def _problems(path: Path, exc: ValidationError) -> list[ConfigProblem]:
    found = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"])
        message = error["msg"]
        if error["type"] == "enum":
            message = f"{message}; got {error.get('input')!r}"
        elif error["type"] == "missing":
            message = "required key is missing"
        elif error["type"] == "extra_forbidden":
            message = f"unknown key (value {error.get('input')!r})"
        elif error["type"] == "string_pattern_mismatch":
            message = f"{error.get('input')!r} is not a valid name: lowercase letters, digits, '-' and '_'"
        found.append(ConfigProblem(path, key, message))
    return found
