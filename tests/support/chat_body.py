"""The chat completions request body tests write by hand (``tests.support.bodies`` draws them at random)."""

from __future__ import annotations

from typing import Any


def chat_body(system: str | None = None, user_text: str = "hi", *, model: str = "m", **fields: Any) -> dict[str, Any]:
    """``model``, then the messages: ``system``'s (when given) and one user message, then ``fields`` as given
    (``max_tokens``, ``stream``, ``tools``; ``messages`` replaces them). A module whose bodies share other
    defaults binds them once: ``chat = partial(chat_body, model="fake-model", max_tokens=4)``."""
    messages = [{"role": "system", "content": system}] if system is not None else []
    return {"model": model, "messages": [*messages, {"role": "user", "content": user_text}], **fields}
