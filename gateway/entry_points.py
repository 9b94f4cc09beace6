"""Loading `module:function` entry points named in tenant files, checked at start-up."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from gateway.errors import ConfigError


def load_entry_point(spec: str, where: str, sample: tuple[Any, ...], shape: str) -> Callable[..., Any]:
    """Import `module:function` and check it accepts `sample` positional arguments (`shape` names them)."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{where}: cannot import module {module_name!r} of {spec!r}: {exc}") from exc
    function = getattr(module, attribute, None)
    if not callable(function):
        raise ConfigError(f"{where}: {spec!r} is not a callable in module {module_name!r}")
    try:
        inspect.signature(function).bind(*sample)
    except TypeError as exc:
        raise ConfigError(f"{where}: {spec!r} must accept {shape}: {exc}") from exc
    return function


# Every kind of entry point a tenant file can name: (what it is, sample arguments, their names).
# The samples only bind against the signature; nothing is called at check time.
RETRIEVER = ("retriever", ("request",), "(request)")
SUBSCRIBER = ("hook subscriber", ("event",), "(event)")
CALLBACK = ("callback router", ("query", {}), "(query, metadata)")
CUSTOM_STAGE = ("custom stage", ("query", [], {}), "(query, hits, params)")
CUSTOM_QUERY_STAGE = ("custom query stage", ("question", [], {}), "(question, queries, params)")


def tenant_entry_points(tenant: Any) -> list[tuple[str, str, tuple[str, tuple[Any, ...], str]]]:
    """(key in the tenant file, `module:function`, kind) for every entry point `tenant` names."""
    found = [(f"namespaces.{n}.collections.{c}.retriever", cfg.retriever, RETRIEVER)
             for n, ns in tenant.namespaces.items() for c, cfg in ns.collections.items() if cfg.retriever]
    found += [(f"hooks.subscribers.{i}", spec, SUBSCRIBER) for i, spec in enumerate(tenant.hooks.subscribers)]
    found += [(f"router.rules.{i}.callback.function", rule.callback.function, CALLBACK)
              for i, rule in enumerate(tenant.router.rules) if rule.callback is not None]
    found += [(f"pipelines.{name}.stages.{i}.custom.function", stage.params.function, CUSTOM_STAGE)
              for name, pipeline in tenant.pipelines.items() for i, stage in enumerate(pipeline.stages)
              if stage.kind == "custom"]
    found += [(f"pipelines.{name}.stages.{i}.customQuery.function", stage.params.function, CUSTOM_QUERY_STAGE)
              for name, pipeline in tenant.pipelines.items() for i, stage in enumerate(pipeline.stages)
              if stage.kind == "customQuery"]
    return found


def entry_point_problems(tenant: Any) -> list[tuple[str, str]]:
    """(key, message) for every entry point of `tenant` that cannot be imported or called as named."""
    problems = []
    for key, spec, (kind, sample, shape) in tenant_entry_points(tenant):
        try:
            load_entry_point(spec, f"{kind} {spec!r}", sample, shape)
        except ConfigError as exc:
            problems.append((key, exc.message))
    return problems
