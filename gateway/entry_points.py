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
