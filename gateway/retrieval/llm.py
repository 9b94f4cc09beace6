"""A small client for an OpenAI-compatible chat endpoint, used by language-model stages.

Stages ask for JSON and parse it here; a timeout, an HTTP error or an answer that is not the
JSON object asked for all raise `UpstreamUnavailable`, so each stage's `on_error` decides
whether the request fails or the stage is skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from gateway.errors import ConfigError, UpstreamUnavailable

if TYPE_CHECKING:
    from gateway.tenancy.config import TenantConfig

# Models often wrap JSON in a ```json fence even when asked not to.
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class ChatClient:
    """POST {base_url}/chat/completions with {model, messages}; returns the first choice's text."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 20.0,
                 temperature: float = 0.0, max_tokens: int = 512,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._url = f"{base_url.rstrip('/')}/chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._transport = transport
        self.model = model
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._timeout_s = timeout_s

    async def complete(self, system: str, user: str) -> str:
        payload = {"model": self.model, "temperature": self._temperature, "max_tokens": self._max_tokens,
                   "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
        try:
            # A client per call: stages outlive event loops (the CLI runs one per evaluation), and a
            # connection set-up is small beside a language model's answer time.
            async with httpx.AsyncClient(timeout=self._timeout_s, transport=self._transport) as client:
                response = await client.post(self._url, json=payload, headers=self._headers)
        except httpx.TimeoutException:
            raise UpstreamUnavailable(f"language model {self.model!r} did not answer within "
                                      f"{self._timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(f"language model {self.model!r} is unreachable: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise UpstreamUnavailable(f"language model {self.model!r} answered HTTP {response.status_code}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise UpstreamUnavailable(f"language model {self.model!r} answered without "
                                      "choices[0].message.content") from None
        if not isinstance(content, str):
            raise UpstreamUnavailable(f"language model {self.model!r} answered non-text content")
        return content

    async def complete_json(self, system: str, user: str) -> dict[str, Any]:
        """The answer parsed as one JSON object, or UpstreamUnavailable naming what was wrong."""
        text = await self.complete(system, user)
        fenced = _FENCE.match(text)
        if fenced:
            text = fenced.group(1)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UpstreamUnavailable(f"language model {self.model!r} answered malformed JSON "
                                      f"({exc.msg} at character {exc.pos})") from None
        if not isinstance(data, dict):
            raise UpstreamUnavailable(f"language model {self.model!r} answered JSON {type(data).__name__}, "
                                      "not an object")
        return data


def secret_from(environ: Mapping[str, str], name: str | None, where: str, what: str = "API key") -> str | None:
    """The value of environment variable `name` (None when no variable is named); a named but unset
    variable stops start-up, saying who reads it."""
    if name is None:
        return None
    value = environ.get(name)
    if not value:
        raise ConfigError(f"{where} reads its {what} from ${name}, which is not set")
    return value


def chat_client(tenant: TenantConfig, environ: Mapping[str, str]) -> ChatClient:
    """The tenant's `llm` endpoint, for pipeline stages and follow-up rewriting alike."""
    config = tenant.llm
    if config is None:
        raise ConfigError(f"tenant {tenant.id!r} has no `llm` section (base_url, model, api_key_env, timeout_ms)")
    key = secret_from(environ, config.api_key_env, f"tenant {tenant.id!r} llm")
    return ChatClient(config.base_url, config.model, api_key=key, timeout_s=config.timeout_ms / 1000,
                      temperature=config.temperature, max_tokens=config.max_tokens)
