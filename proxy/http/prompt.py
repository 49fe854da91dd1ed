"""The request on its way through ``Preparation``'s steps: its body as it will be sent, and what the
steps learned of it (``Prompt``); the call as one pool takes it (``Planned``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from policies.admission.request_plan import CallPlan, ShapedBody
from policies.prompt.stable_prefix import Pieces


class Planned(NamedTuple):
    """The call as one pool takes it (``plan_call``), and the body it gets (``shape_body``)."""

    plan: CallPlan
    shaped: ShapedBody


@dataclass(slots=True)
class Prompt:
    """The request body on its way to the engine, and what the steps learned of it."""

    raw: bytes  # as received, until a step changes the body
    body: dict[str, Any]
    changed: bool = False  # a step made a new body: serialize it again
    pieces: Pieces | None = None  # the prompt as rendered, for the prefix meter, admission and replica choice
    fallback: str | None = None  # evidence to answer with if the model cannot
    # The Responses API: the conversation as the chat template reads it (for the replica's KV match),
    # the input items a continued turn took from its stored response, and that response's id.
    conversation: dict[str, Any] | None = None
    history: int = 0
    previous: str | None = None
