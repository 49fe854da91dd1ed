"""Tenant rate limits: requests and tokens per rolling minute, exact.

A sliding-window log: every admitted request is an entry (its time and its tokens) kept for one
minute; a request is admitted only if, counting it, the last minute holds at most the limit of
requests and of tokens. Unlike a token bucket or fixed windows it never lets more than the limit
through in any 60 seconds, which is what a tenant reads "100 requests per minute" to mean, and the
time until a refused request would fit follows from the oldest entries.

Tokens are reserved at admission (prompt tokens plus the output reservation) and settled with the
actual usage when the answer ends, so a short answer gives back what it did not use.

The same algorithm runs in memory here and in Redis (the ``Limiter``'s Lua script) when gateways share
limits; the caller keeps the window per tenant and passes the clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from policies.refusals import LimitState, RateLimited

WINDOW_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class RateLimits:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    @property
    def active(self) -> bool:
        return self.requests_per_minute is not None or self.tokens_per_minute is not None


@dataclass(frozen=True, slots=True)
class Verdict:
    admitted: bool
    remaining_requests: int | None  # after this request; None where that limit is off
    remaining_tokens: int | None
    reset_requests: float  # seconds until one more request would fit (0: it fits now)
    reset_tokens: float  # seconds until this request's tokens would fit (0: they fit now)
    too_large: bool = False  # the request's tokens alone exceed the limit: waiting cannot help

    @property
    def retry_after(self) -> float:
        return max(self.reset_requests, self.reset_tokens)


def limit_states(limits: RateLimits, verdict: Verdict) -> tuple[LimitState, ...]:
    """Each limit the tenant has, requests first, as it stands after ``verdict``: what OpenAI's x-ratelimit-*
    headers report (``proxy.wire.headers.ratelimit_headers`` writes them) and a ``RateLimited`` refusal carries."""
    states = []
    if limits.requests_per_minute is not None:
        states.append(LimitState("requests", limits.requests_per_minute, verdict.remaining_requests,
                                 verdict.reset_requests))
    if limits.tokens_per_minute is not None:
        states.append(LimitState("tokens", limits.tokens_per_minute, verdict.remaining_tokens, verdict.reset_tokens))
    return tuple(states)


def rate_limited(limits: RateLimits, verdict: Verdict, tokens: int) -> RateLimited:
    """The refusal of a request of ``tokens`` (prompt plus reserved output) that ``verdict`` did not admit."""
    return RateLimited(limit_states(limits, verdict), tokens, verdict.too_large)


def output_reservation(max_tokens: int | None, predicted_p95: int | None, fallback: int) -> int:
    """Tokens held for the answer until its usage is known: min(max_tokens, predicted p95)."""
    candidates = [value for value in (max_tokens, predicted_p95) if value is not None]
    return min(candidates) if candidates else fallback


class Entry:
    """One admitted request in a window; its tokens change once, at settlement."""

    __slots__ = ("at", "expired", "tokens")

    def __init__(self, at: float, tokens: int) -> None:
        self.at = at
        self.tokens = tokens
        self.expired = False  # left the window; settling it changes nothing


class SlidingWindow:
    """One tenant's last minute of admitted requests."""

    __slots__ = ("entries", "tokens")

    def __init__(self) -> None:
        self.entries: deque[Entry] = deque()
        self.tokens = 0  # sum over entries

    def _expire(self, now: float) -> None:
        horizon = now - WINDOW_SECONDS
        entries = self.entries
        while entries and entries[0].at <= horizon:
            entry = entries.popleft()
            entry.expired = True
            self.tokens -= entry.tokens

    def _wait_for_tokens(self, now: float, needed: int) -> float:
        """Seconds until ``needed`` tokens have left the window."""
        freed = 0
        for entry in self.entries:
            freed += entry.tokens
            if freed >= needed:
                return entry.at + WINDOW_SECONDS - now
        return WINDOW_SECONDS

    def admit(self, now: float, tokens: int, limits: RateLimits) -> tuple[Verdict, Entry | None]:
        """Admit one request of ``tokens`` if both limits allow it; the entry is for settlement."""
        self._expire(now)
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        count = len(self.entries)
        reset_requests = reset_tokens = 0.0
        too_large = tpm is not None and tokens > tpm
        if rpm is not None and count + 1 > rpm:
            reset_requests = self.entries[count - rpm].at + WINDOW_SECONDS - now  # the entry whose exit makes room
        if tpm is not None and not too_large and self.tokens + tokens > tpm:
            reset_tokens = self._wait_for_tokens(now, self.tokens + tokens - tpm)
        admitted = not too_large and reset_requests == 0.0 and reset_tokens == 0.0
        entry = None
        if admitted:
            entry = Entry(now, tokens)
            self.entries.append(entry)
            self.tokens += tokens
            count += 1
        verdict = Verdict(
            admitted,
            None if rpm is None else max(0, rpm - count),
            None if tpm is None else max(0, tpm - self.tokens),
            reset_requests, reset_tokens, too_large,
        )
        return verdict, entry

    def settle(self, entry: Entry, tokens: int) -> None:
        """Replace an entry's reserved tokens with what the request used, if it is still in the window."""
        if not entry.expired:
            self.tokens += tokens - entry.tokens
            entry.tokens = tokens
