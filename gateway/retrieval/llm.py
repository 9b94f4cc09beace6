"""A small client for an OpenAI-compatible chat endpoint, used by language-model stages.

Stages ask for JSON and parse it here; a timeout, an HTTP error or an answer that is not the
JSON object asked for all raise `UpstreamUnavailable`, so each stage's `on_error` decides
whether the request fails or the stage is skipped.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from gateway.errors import UpstreamUnavailable

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
