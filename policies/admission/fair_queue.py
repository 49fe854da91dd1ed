"""A bounded wait queue shared fairly by tenants.

When a pool is at its in-flight cap, requests wait here for a slot. Two rules keep one greedy tenant
from starving the rest: a tenant may hold at most its share of the slots (the bound divided by the
tenants waiting, itself included, rounded up), and freed slots go to tenants in turn (round-robin
over tenants, first come first served within one). A request the queue cannot take is shed at once,
which is cheaper for everyone than a wait that ends in a timeout; and when the queue is full, a
tenant under its share takes the place of the newest waiter of the tenant furthest over its own.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    __slots__ = ("bound", "size", "tenants")

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.size = 0
        self.tenants: OrderedDict[str, deque[T]] = OrderedDict()  # in turn order: the next to serve first

    def share(self, tenant: str) -> int:
        """Slots ``tenant`` may hold with the tenants waiting now (and itself)."""
        waiting = len(self.tenants) + (tenant not in self.tenants)
        return math.ceil(self.bound / waiting)

    def can_take(self, tenant: str) -> bool:
        held = len(self.tenants.get(tenant, ()))
        return self.size < self.bound and held < self.share(tenant)

    def make_room(self, tenant: str) -> T | None:
        """With the queue full, a tenant under its share takes the place of the newest waiter of the
        tenant furthest over its own share; returns that waiter (to be refused), or None."""
        if self.size < self.bound or len(self.tenants.get(tenant, ())) >= self.share(tenant):
            return None
        share = self.share(tenant)
        items = max(self.tenants.values(), key=len)
        if len(items) <= share:
            return None
        self.size -= 1
        return items.pop()

    def push(self, tenant: str, item: T) -> None:
        self.tenants.setdefault(tenant, deque()).append(item)
        self.size += 1

    def pop(self) -> T | None:
        """The next item, from the tenant whose turn it is; that tenant goes to the back of the turn."""
        if not self.tenants:
            return None
        tenant, items = next(iter(self.tenants.items()))
        item = items.popleft()
        self.size -= 1
        if items:
            self.tenants.move_to_end(tenant)
        else:
            del self.tenants[tenant]
        return item

    def remove(self, tenant: str, item: T) -> bool:
        """Take out an item that stopped waiting (timed out, client gone); False if it was not here."""
        items = self.tenants.get(tenant)
        if items is None:
            return False
        try:
            items.remove(item)
        except ValueError:
            return False
        self.size -= 1
        if not items:
            del self.tenants[tenant]
        return True
