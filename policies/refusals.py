"""Why prefixgate refuses or fails a request, as plain data.

Each kind of refusal is its own type, so the code that acts on one (overflow to another pool on a
``Shed``, the passages answer when no replica is healthy) tests the type rather than matching an
error code's string. Policies return them; the shell raises them inside ``Refused``; exactly one
function, ``openai_error`` (``proxy.wire.errors``), turns each into the status, message, type, code and
headers an OpenAI client expects. The module sits at the bottom of ``policies/``, below ``request``, so
every policy package may return one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from policies.vocabulary import Vocabulary


class ShedReason(Vocabulary):
    """Why a pool sheds a request: the ``reason`` of ``Shed``, its 503's error code, and the ``reason`` label of
    prefixgate_shed_total. The metric's help and docs/configuration.md are written from it."""

    QUEUE_FULL = "queue_full", "the pool's wait queue (queue_size) is full"
    QUEUE_SHARE_EXCEEDED = "queue_share_exceeded", ("the tenant already holds its share of the wait queue, or its "
                                                    "newest waiter gave its place to a tenant under its share")
    QUEUE_TIMEOUT = "queue_timeout", "no slot came free within the pool's queue_timeout"
    NO_HEALTHY_UPSTREAM = "no_healthy_upstream", "every replica of the pool is ejected"


# prefixgate_shed_total's reason for a request shed and then taken by the pool's overflow_to: the reason, then this
OVERFLOWED = "_overflowed"
UpstreamFailure = Literal["timeout", "unreachable", "broken"]


@dataclass(frozen=True, slots=True)
class Rejection:
    """A decision to refuse a request, carried up to the HTTP layer as an OpenAI-shaped error."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None
    type: str = "invalid_request_error"


@dataclass(frozen=True, slots=True)
class Unauthorized:
    """No API key, an unparsable Authorization header, or a key no tenant has."""

    reason: Literal["missing", "malformed", "invalid"]


@dataclass(frozen=True, slots=True)
class AdminOnly:
    """A route that answers only the admin key (``auth.admin_key``)."""

    path: str


@dataclass(frozen=True, slots=True)
class UnknownModel:
    model: str


@dataclass(frozen=True, slots=True)
class UnknownPool:
    """``x-prefixgate-pool`` names no pool."""

    name: str
    pools: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UnknownTenant:
    """An admin route's ``x-prefixgate-tenant`` names no tenant (None: it is missing where API keys name tenants)."""

    name: str | None


@dataclass(frozen=True, slots=True)
class ModelNotInPool:
    """``x-prefixgate-pool`` names a pool that does not serve the request's model."""

    pool: str
    model: str


@dataclass(frozen=True, slots=True)
class LimitState:
    """One of a tenant's rate limits as it stands after a request (``policies.admission.limits.limit_states``):
    what OpenAI's ``x-ratelimit-*`` headers report on every answer of a limited tenant, and its 429s."""

    unit: Literal["requests", "tokens"]
    limit: int  # per minute
    remaining: int | None  # left after this request
    reset: float  # seconds until it has room for this request (0: it has now)


@dataclass(frozen=True, slots=True)
class RateLimited:
    """Over the tenant's requests or tokens per minute: each of its ``limits`` as it stands (requests first);
    ``tokens``: what the request would have counted, prompt plus reserved output; ``too_large``: those tokens
    alone exceed the tokens limit, so waiting cannot help."""

    limits: tuple[LimitState, ...]
    tokens: int
    too_large: bool = False

    @property
    def refusing(self) -> LimitState:
        """The limit that refused it: the one that frees up last (of two as late, requests)."""
        return max(self.limits, key=lambda state: state.reset)


@dataclass(frozen=True, slots=True)
class LimiterDown:
    """The rate limits' shared store is unreachable, so they cannot be checked."""

    retry_after: float


@dataclass(frozen=True, slots=True)
class StateUnavailable:
    """The store of Responses conversations (Redis) is unreachable: a turn that continues one cannot be
    read, nor a response fetched or deleted."""

    retry_after: float


@dataclass(frozen=True, slots=True)
class Shed:
    """The pool has no room for the request now: it may go to the pool's overflow pool instead."""

    pool: str
    reason: ShedReason
    retry_after: float
    queue_timeout: float = 0.0  # for queue_timeout: how long it waited


@dataclass(frozen=True, slots=True)
class UpstreamFailed:
    """The replica did not answer in time, could not be reached, or broke off its answer."""

    pool: str
    failure: UpstreamFailure


@dataclass(frozen=True, slots=True)
class ProviderFailed:
    """A hosted provider (a litellm pool) refused or failed: its 4xx as it came, else a 502."""

    pool: str
    status: int
    detail: str


@dataclass(frozen=True, slots=True)
class ShuttingDown:
    """The server stops before the answer is done (``server.drain_timeout_s`` passed)."""


@dataclass(frozen=True, slots=True)
class TooManyConnections:
    """A connection opened over ``server.max_connections`` while every other one was busy."""


@dataclass(frozen=True, slots=True)
class RequestTimeout:
    """A request that did not arrive by its deadline; ``evicted``: closed early to make room at the cap."""

    evicted: bool = False


@dataclass(frozen=True, slots=True)
class InternalError:
    """A bug: the client still gets an OpenAI-shaped answer, without a traceback."""


Refusal = (
    Rejection | Unauthorized | AdminOnly | UnknownModel | UnknownPool | UnknownTenant | ModelNotInPool | RateLimited
    | LimiterDown | StateUnavailable
    | Shed | UpstreamFailed | ProviderFailed | ShuttingDown | TooManyConnections | RequestTimeout | InternalError
)


class Refused(Exception):
    """Carries a ``Refusal`` up from where the shell finds it to the route that answers with it."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal)
        self.refusal = refusal
