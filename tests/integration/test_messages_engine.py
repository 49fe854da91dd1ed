"""The Anthropic Messages API (``/v1/messages``, ``/v1/messages/count_tokens``) on the real engine, through prefixgate
and straight to vLLM, with the ``anthropic`` SDK unchanged: the same answers, streamed or whole, a tool round trip,
the same token counts, the SDK's own error types, and the engine's prefix cache reported to the client.

The engine is greedy (the ``embedded`` fixture), so answers compare exactly. The tiny model's random weights never
end free text by themselves, so plain answers are cut by ``max_tokens``; a forced tool call's grammar closes its
arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import anthropic
import pytest

from tests.support.embedded import Embedded

pytestmark = pytest.mark.engine

SYSTEM = "You track parcels for a courier."
QUESTION = "Is parcel 7731 late?"
TRACK = {"name": "track_parcel", "description": "Where a parcel is now.", "input_schema": {
    "type": "object", "additionalProperties": False, "required": ["reasoning", "parcel_id"],
    "properties": {"reasoning": {"type": "string", "pattern": "^[a-z ]{1,12}$"},
                   "parcel_id": {"type": "string", "pattern": "^[0-9]{1,6}$"}}}}

Sdk = Callable[[str], anthropic.Anthropic]


@pytest.fixture
def sdk() -> Iterator[Sdk]:
    """``sdk(origin)``: an Anthropic client for prefixgate or the engine (which checks no key), closed after."""
    with ExitStack() as clients:

        def client(origin: str, key: str = "sk-unused") -> anthropic.Anthropic:
            return clients.enter_context(anthropic.Anthropic(base_url=origin, api_key=key, max_retries=0))

        yield client


def both(embedded: Embedded, sdk: Sdk, run: Callable[[anthropic.Anthropic], Any]) -> tuple[Any, Any]:
    return run(sdk(embedded.proxy)), run(sdk(embedded.engine))


def test_a_message_is_the_engines_answer_whole_and_streamed(embedded: Embedded, sdk: Sdk) -> None:
    def whole(client: anthropic.Anthropic) -> tuple[Any, ...]:
        message = client.messages.create(model=embedded.model, max_tokens=12, system=SYSTEM,
                                         messages=[{"role": "user", "content": QUESTION}])
        return message.content[0].text, message.stop_reason, message.usage.output_tokens

    def streamed(client: anthropic.Anthropic) -> tuple[Any, ...]:
        with client.messages.stream(model=embedded.model, max_tokens=12, system=SYSTEM,
                                    messages=[{"role": "user", "content": QUESTION}]) as stream:
            message = stream.get_final_message()
        return message.content[0].text, message.stop_reason, message.usage.output_tokens

    through, direct = both(embedded, sdk, whole)
    assert through == direct and through[1] == "max_tokens" and through[2] == 12
    assert both(embedded, sdk, streamed) == (direct, direct)


def test_a_tool_round_trip_is_the_engines(embedded: Embedded, sdk: Sdk) -> None:
    def run(client: anthropic.Anthropic) -> tuple[Any, Any]:
        asked: list[Any] = [{"role": "user", "content": QUESTION}]
        first = client.messages.create(model=embedded.model, max_tokens=64, system=SYSTEM, tools=[TRACK],
                                       tool_choice={"type": "tool", "name": "track_parcel"}, messages=asked)
        call = next(block for block in first.content if block.type == "tool_use")
        asked += [{"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": "In the depot since Monday."}]}]
        second = client.messages.create(model=embedded.model, max_tokens=10, system=SYSTEM, tools=[TRACK],
                                        messages=asked)
        return call.input, [block.model_dump(exclude={"id"}) for block in second.content]

    through, direct = both(embedded, sdk, run)
    assert through == direct and set(through[0]) == {"reasoning", "parcel_id"}


def test_count_tokens_is_the_engines(embedded: Embedded, sdk: Sdk) -> None:
    def run(client: anthropic.Anthropic) -> int:
        return client.messages.count_tokens(model=embedded.model, system=SYSTEM, tools=[TRACK],
                                            messages=[{"role": "user", "content": QUESTION}]).input_tokens

    through, direct = both(embedded, sdk, run)
    assert through == direct > 10


def test_refusals_raise_the_sdks_own_error_types(embedded: Embedded, sdk: Sdk) -> None:
    client = sdk(embedded.proxy)
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=embedded.model, max_tokens=5, messages=[{"role": "tool", "content": "x"}])
    assert "messages[0].role" in bad.value.message and bad.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="no-such-model", max_tokens=5, messages=[{"role": "user", "content": "x"}])


def test_a_changing_clock_line_in_the_system_text_still_hits_the_engines_prefix_cache(
        embedded: Embedded, sdk: Sdk) -> None:
    """The same long system text with a new time on each request: through prefixgate the second request reads its
    prompt's head from the engine's cache (the client sees it in ``cache_read_input_tokens``); straight to vLLM
    the time line near the top makes every block after it miss."""
    rules = "\n".join(f"Rule {n}: parcels in zone {n} are checked at depot {n % 7} before noon." for n in range(60))

    def cached(client: anthropic.Anthropic, minute: int) -> int:
        message = client.messages.create(
            model=embedded.model, max_tokens=1,
            system=[{"type": "text", "text": f"{SYSTEM}\nCurrent time: 2026-11-28 10:{minute:02d}:00 UTC\n{rules}"}],
            messages=[{"role": "user", "content": QUESTION}])
        return message.usage.cache_read_input_tokens or 0

    through, direct = sdk(embedded.proxy), sdk(embedded.engine)
    cached(through, 1), cached(direct, 3)
    assert cached(through, 2) > 600
    assert cached(direct, 4) < 64
