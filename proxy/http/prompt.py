"""The request on its way through ``Preparation``'s steps (``Prompt``): each step's result in a field of
its own, set once, so whatever reads the body names the stage it reads; the call as one pool takes it
(``Planned``: the plan, and the body as sent)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from policies.admission.request_plan import CallPlan, ShapedBody
from policies.prompt.stable_prefix import Pieces


class Planned(NamedTuple):
    """The call as one pool takes it (``plan_call``), and the body it gets (``shape_body``): the last
    stage, the one sent and charged."""

    plan: CallPlan
    shaped: ShapedBody


@dataclass(slots=True)
class Prompt:
    """The request body by stage. ``raw`` and ``received`` are the body as the client sent it; each later
    stage is None where its step changed nothing, so ``body`` (the latest stage) is the received one until
    a step makes a new one, and ``changed`` says whether it must be serialized again. The stages, in order:

    - ``recalled``: a Responses turn with its stored conversation before it (``recall``);
    - ``canonical``: the prompt rewritten for the prefix cache (``rewrite_chat``, ``rewrite_responses``);
    - ``retrieved``: the tenant's passages added (``add_context``);
    - ``admitted``: within the caps admission applied (``Admission.prepare``).

    The pool's plan (its caps, the cache salt) makes the body as sent: ``Planned.shaped``."""

    raw: bytes
    received: dict[str, Any]
    recalled: dict[str, Any] | None = None
    canonical: dict[str, Any] | None = None
    retrieved: dict[str, Any] | None = None
    admitted: dict[str, Any] | None = None
    pieces: Pieces | None = None  # the prompt as rendered, for the prefix meter, admission and replica choice
    fallback: str | None = None  # evidence to answer with if the model cannot
    # The Responses API: the conversation as the chat template reads it (for the replica's KV match),
    # the input items a continued turn took from its stored turns, the id it continues, and every turn's id.
    conversation: dict[str, Any] | None = None
    history: int = 0
    previous: str | None = None
    earlier: tuple[str, ...] = ()  # the ids of the conversation's turns so far, the first first

    @property
    def body(self) -> dict[str, Any]:
        """The latest stage."""
        for stage in (self.admitted, self.retrieved, self.canonical, self.recalled):
            if stage is not None:
                return stage
        return self.received

    @property
    def changed(self) -> bool:
        """Some step made a new body: it is serialized again rather than sent as received."""
        return (self.admitted is not None or self.retrieved is not None or self.canonical is not None
                or self.recalled is not None)
