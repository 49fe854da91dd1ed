"""A pool's in-flight cap with a bounded, tenant-fair wait queue in front of it.

Past ``capacity`` requests in flight, a request waits for a slot (``FairQueue`` decides
who may wait and who goes next); a full queue, or a tenant past its share, is answered 503 at once,
and a wait past ``timeout`` seconds of the pool's clock is answered 503 then. Both carry Retry-After,
so clients back off instead of hammering an engine that is already saturated.
"""

from __future__ import annotations

import asyncio

from policies.admission.fair_queue import FairQueue
from policies.refusals import Refused, Shed, ShedReason
from proxy.clock import Clock


class PoolGate:
    __slots__ = ("capacity", "clock", "in_flight", "name", "queue", "timeout")

    def __init__(self, name: str, capacity: int, queue_size: int, timeout: float, clock: Clock) -> None:
        self.name = name
        self.clock = clock  # the queue's timeout runs out on it
        self.capacity = capacity
        self.timeout = timeout
        self.in_flight = 0
        self.queue: FairQueue[asyncio.Future[None]] = FairQueue(queue_size)

    def _shed(self, reason: ShedReason) -> Refused:
        return Refused(Shed(self.name, reason, retry_after=min(self.timeout, 5.0), queue_timeout=self.timeout))

    async def acquire(self, tenant: str) -> None:
        """Take a slot, waiting fairly for one; raises the ``Shed`` refusal that sheds the request."""
        if self.in_flight < self.capacity and not self.queue.size:
            self.in_flight += 1
            return
        if not self.queue.can_take(tenant):
            displaced = self.queue.make_room(tenant)
            if displaced is None:
                raise self._shed(ShedReason.QUEUE_SHARE_EXCEEDED if self.queue.size < self.queue.bound
                                 else ShedReason.QUEUE_FULL)
            displaced.set_exception(self._shed(ShedReason.QUEUE_SHARE_EXCEEDED))
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue.push(tenant, slot)
        try:
            async with self.clock.deadline(self.clock() + self.timeout):
                await asyncio.shield(slot)  # a timeout cancels the wait, not the slot a release may grant
        except TimeoutError:
            if self.queue.remove(tenant, slot):
                raise self._shed(ShedReason.QUEUE_TIMEOUT) from None
            if not _granted(slot):  # displaced in the same turn: shed for that
                raise self._shed(ShedReason.QUEUE_SHARE_EXCEEDED) from None
            # the slot was granted as the wait ran out: keep it
        except BaseException:  # displaced, or the client left while waiting: give up the place or the slot
            if not self.queue.remove(tenant, slot) and _granted(slot):
                self.release()
            raise

    def release(self) -> None:
        """Give the slot to the next waiting request in fair order, else free it."""
        while True:
            slot = self.queue.pop()
            if slot is None:
                self.in_flight -= 1
                return
            if not slot.done():
                slot.set_result(None)  # in_flight stays: the slot passes to the waiter
                return


def _granted(slot: asyncio.Future[None]) -> bool:
    """A release gave this waiter the slot; not so if it was displaced (the future holds its shed, read here so
    it is not reported as never retrieved) or never settled."""
    return slot.done() and not slot.cancelled() and slot.exception() is None
