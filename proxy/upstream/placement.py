"""Where a prompt sits among one pool's replicas (``Placement``), found once by ``Pool.place`` and read
by ``Pool.pick`` and ``Pool.explain``; the pick itself (``Picked``), with what the call records of it and the
pool as the exchange with the replica reads it (``ExchangePool``); and the choice as the admin route explains it
(``Explained``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from policies.routing.replica import ReplicaReason
from proxy.clock import Clock
from proxy.config.upstream import Timeouts
from proxy.upstream.replica import Replica


class ExchangePool(Protocol):
    """What the ``Exchange`` with a picked replica reads of its pool: its name, clock and timeouts, and its
    retries (how many, the budget they share, the replica to move a request to)."""

    name: str
    clock: Clock
    timeouts: Timeouts
    retries: int
    retry_budget: float
    retrying: int

    def in_flight(self) -> int: ...

    def alternate(self, failed: Replica) -> Replica | None: ...

    def retry_started(self) -> None: ...

    def retry_ended(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Placement:
    """A prompt's place in one pool: its key on the pool's ring (None where the pool does not balance by
    prefix), and per replica how many of its leading blocks that replica's engine holds (``balance:
    kv_events``; None otherwise) in blocks of ``block_size`` tokens. A placement indexes one pool's
    replicas, so a request planned again for another pool is placed again."""

    key: int | None = None
    held: list[int] | None = None
    block_size: int = 0
    session: bool = False  # the key is a named session's: of engines holding as much, its own replica

    def held_tokens(self, index: int) -> int | None:
        """The prompt's tokens replica ``index``'s engine holds; None where the pool does not track them."""
        return None if self.held is None or not self.block_size else self.held[index] * self.block_size


NOWHERE = Placement()  # a prompt with no place: the pool balances by load alone


@dataclass(frozen=True, slots=True)
class Picked:
    """The replica ``Pool.pick`` chose, why, and how much of the prompt its engine held."""

    replica: Replica
    reason: ReplicaReason
    held_tokens: int | None
    pool: ExchangePool  # the pool that picked it, as the exchange with the replica reads it


@dataclass(frozen=True, slots=True)
class Explained:
    """A replica choice as ``Pool.explain`` reports it: the replica, why, and each replica's reading."""

    replica: str
    reason: ReplicaReason
    replicas: list[dict[str, Any]]
