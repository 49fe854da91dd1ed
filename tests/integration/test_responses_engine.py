"""The Responses API (``POST /v1/responses``) on the real engine, through prefixgate and straight to vLLM.

vLLM's own response store is off (its default), so an engine cannot continue a conversation: a
``previous_response_id`` sent straight to it is a 404. prefixgate keeps each tenant's responses itself and sends a
continued turn as the whole conversation, so the answer must be the one the engine gives when sent that
conversation by hand (the earlier input items, the earlier output items, this turn's input), whichever replica
serves it, and after a gateway restart when the store is Redis.

The engines are greedy (the ``embedded`` fixture's ``--override-generation-config``; the second engine here is
started the same way), so answers compare exactly. The tiny model's random weights hardly ever end free text by
themselves (none of 60 prompts did within 300 tokens), so plain answers are cut by ``max_output_tokens`` (status
``incomplete``, the same both ways) and answers that must end on their own are structured: the grammar of a JSON
schema, or of a forced function call, closes them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Annotated, Any

import openai
import pytest
from agents import Agent, ItemHelpers, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from agents.result import RunResultBase
from pydantic import BaseModel, Field

from proxy.config.server import EngineConfig
from proxy.engine.process import LocalEngine, free_port
from tests.support.configs import pool
from tests.support.embedded import Embedded, running
from tests.support.gateways import gateway_processes
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.engine

INSTRUCTIONS = "You track parcels for a courier."
QUESTION = "Is parcel 7731 late? Think first."
FOLLOW_UP = "And tomorrow?"
GREEDY = {"temperature": 0}


class Verdict(BaseModel):
    """Reasoning first, on purpose: "reasoning" sorts after "answer". Patterns keep the tiny model's junk short."""

    reasoning: str = Field(pattern="^[a-z ]{1,16}$")
    answer: str = Field(pattern="^[a-z ]{1,8}$")


REASONING_FIRST = {"type": "object", "additionalProperties": False, "required": ["reasoning", "answer"],
                   "properties": {"reasoning": {"type": "string", "pattern": "^[a-z ]{1,16}$"},
                                  "answer": {"type": "string", "pattern": "^[a-z ]{1,8}$"}}}
TRACK = {"type": "function", "name": "track_parcel", "description": "Where a parcel is now.", "parameters": {
    "type": "object", "additionalProperties": False, "required": ["reasoning", "parcel_id"],
    "properties": {"reasoning": {"type": "string", "pattern": "^[a-z ]{1,12}$"},
                   "parcel_id": {"type": "string", "pattern": "^[0-9]{1,6}$"}}}}


Sdk = Callable[..., openai.OpenAI]


@pytest.fixture
def sdk() -> Iterator[Sdk]:
    """``sdk(origin, key)``: an OpenAI client for prefixgate or an engine, closed after the test."""
    with ExitStack() as clients:

        def client(origin: str, key: str = "sk-unused") -> openai.OpenAI:
            return clients.enter_context(openai.OpenAI(base_url=origin + "/v1", api_key=key, max_retries=0))

        yield client


def items(response: Any) -> list[dict[str, Any]]:
    """A response's output items as the client received them (to send back as input)."""
    return [item.to_dict() for item in response.output]


def by_hand(engine: openai.OpenAI, earlier: list[Any], response: Any, turn: list[Any], **request: Any) -> Any:
    """What ``engine`` answers when sent the whole conversation itself: ``earlier`` input items, the output
    items of ``response``, then ``turn``."""
    return engine.responses.create(input=[*earlier, *items(response), *turn], **request)


def test_a_response_is_the_engines_streamed_or_not(embedded: Embedded, sdk: Sdk) -> None:
    request = {"model": embedded.model, "instructions": INSTRUCTIONS, "input": QUESTION, "max_output_tokens": 24,
               **GREEDY}
    through, direct = (sdk(origin).responses.create(**request) for origin in (embedded.proxy, embedded.engine))
    assert through.output_text == direct.output_text != ""
    assert (through.status, through.incomplete_details) == (direct.status, direct.incomplete_details)
    assert through.usage is not None and direct.usage is not None
    assert through.usage.input_tokens == direct.usage.input_tokens > 0
    assert through.usage.output_tokens == direct.usage.output_tokens == 24

    def streamed(origin: str) -> tuple[str, Any]:
        """The text of the deltas, and the last event's response (how vLLM groups tokens into events varies)."""
        text, last = "", None
        for event in sdk(origin).responses.create(**request, stream=True):
            text += event.delta if event.type == "response.output_text.delta" else ""
            last = event
        assert last is not None
        return text, last.response

    (text, final), (direct_text, direct_final) = streamed(embedded.proxy), streamed(embedded.engine)
    assert text == direct_text == final.output_text == through.output_text
    assert final.usage.output_tokens == direct_final.usage.output_tokens == 24


def test_structured_output_keeps_the_schemas_order_both_ways(embedded: Embedded, sdk: Sdk) -> None:
    schema = {"type": "json_schema", "name": "verdict", "schema": REASONING_FIRST, "strict": True}
    request = {"model": embedded.model, "input": QUESTION, "text": {"format": schema}, "max_output_tokens": 80,
               **GREEDY}
    through, direct = (sdk(origin).responses.create(**request) for origin in (embedded.proxy, embedded.engine))
    assert (through.status, direct.status) == ("completed", "completed")  # the grammar closed the object
    assert through.output_text == direct.output_text
    assert list(json.loads(through.output_text)) == ["reasoning", "answer"]

    def streamed(origin: str) -> Any:  # the SDK's stream helper, its schema from the pydantic model
        with sdk(origin).responses.stream(model=embedded.model, input=QUESTION, text_format=Verdict,
                                          max_output_tokens=80, **GREEDY) as stream:
            for _ in stream:
                pass
            return stream.get_final_response()

    streamed_through, streamed_direct = streamed(embedded.proxy), streamed(embedded.engine)
    assert streamed_through.output_text == streamed_direct.output_text == through.output_text
    assert streamed_through.output_parsed == Verdict.model_validate_json(through.output_text)


@pytest.fixture(scope="module")
def second_engine(embedded: Embedded, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEngine]:
    """Another engine on the same model, started with the embedded engine's flags (greedy, tool parser, compact
    JSON)."""
    engine = LocalEngine(embedded.model_folder, served_model_name=embedded.model, port=free_port(),
                         log_path=tmp_path_factory.mktemp("second-engine") / "engine.log",
                         extra_args=[*EngineConfig().vllm_args(), "--override-generation-config", json.dumps(GREEDY)])
    with running(engine):
        yield engine


def served_by(log: Path, count: int) -> list[str]:
    """The replica of each of the first ``count`` /responses lines of the access log (written a few times a
    second, off the event loop: waited for)."""

    def lines() -> list[dict[str, Any]] | None:
        text = log.read_text() if log.exists() else ""
        entries = [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]
        entries = [entry for entry in entries if entry["route"] == "/responses"]
        return entries if len(entries) >= count else None

    entries = wait_until(lines, timeout=30, interval=0.1, what=f"{count} /responses lines in the access log")
    assert [entry["status"] for entry in entries] == [200] * len(entries)
    return [entry["replica"] for entry in entries]


def test_a_conversation_continues_on_another_replica(embedded: Embedded, second_engine: LocalEngine, sdk: Sdk,
                                                      start_proxy: Callable[..., str], tmp_path: Path) -> None:
    """Two engines in one pool, by least load (which alternates between idle replicas): the second turn lands on
    the other engine, which never saw the first, and still answers the whole conversation."""
    log = tmp_path / "access.log"
    engines = [embedded.engine + "/v1", second_engine.base_url]
    gateway = sdk(start_proxy({"pools": [pool("engines", *engines, models=[embedded.model], balance="least_loaded")],
                               "access_log": {"enabled": True, "path": str(log)}}))
    request = {"model": embedded.model, "instructions": INSTRUCTIONS, "max_output_tokens": 24, **GREEDY}
    first = gateway.responses.create(input=QUESTION, **request)
    second = gateway.responses.create(input=FOLLOW_UP, previous_response_id=first.id, **request)
    replicas = served_by(log, 2)
    assert sorted(replicas) == sorted(engines)  # one turn on each engine
    assert second.previous_response_id == first.id

    for engine in (embedded.engine, second_engine.origin):  # neither engine can continue it
        with pytest.raises(openai.NotFoundError):
            sdk(engine).responses.create(input=FOLLOW_UP, previous_response_id=first.id, **request)
    whole = by_hand(sdk(replicas[1].removesuffix("/v1")), [{"role": "user", "content": QUESTION}], first,
                    [{"role": "user", "content": FOLLOW_UP}], **request)
    assert second.output_text == whole.output_text != ""
    assert second.usage is not None and whole.usage is not None and first.usage is not None
    assert second.usage.input_tokens == whole.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_a_conversation_survives_a_gateway_restart_with_redis(embedded: Embedded, redis_server: RedisServer,
                                                               sdk: Sdk, tmp_path: Path) -> None:
    keys = {"alpha": "key-alpha-123", "beta": "key-beta-4567"}
    config = {"pools": [pool("engine", embedded.engine + "/v1", models=[embedded.model])],
              # a margin over the default 100 ms per Redis call (sized for caches): a put cut short loses the
              # turn (logged, not refused), and this test is about the restart, not about a loaded machine
              "redis": {"url": redis_server.url, "timeout_ms": 5000},
              "auth": {"keys": [{"tenant": tenant, "key": key} for tenant, key in keys.items()]}}
    request = {"model": embedded.model, "max_output_tokens": 24, **GREEDY}
    with gateway_processes(config, tmp_path, 1) as (origin,):
        first = sdk(origin, keys["alpha"]).responses.create(input=QUESTION, **request)
    with gateway_processes(config, tmp_path, 1) as (origin,):  # a new process: nothing kept in memory
        alpha = sdk(origin, keys["alpha"])
        kept = alpha.responses.retrieve(first.id)
        assert (kept.id, kept.output_text, kept.status) == (first.id, first.output_text, first.status)
        with pytest.raises(openai.NotFoundError):  # another tenant's response is not there for it
            sdk(origin, keys["beta"]).responses.retrieve(first.id)
        second = alpha.responses.create(input=FOLLOW_UP, previous_response_id=first.id, **request)
        whole = by_hand(sdk(embedded.engine), [{"role": "user", "content": QUESTION}], first,
                        [{"role": "user", "content": FOLLOW_UP}], **request)
        assert second.output_text == whole.output_text != ""
        kept = alpha.responses.retrieve(second.id)
        assert (kept.output_text, kept.previous_response_id) == (second.output_text, first.id)

        alpha.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            alpha.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError) as refused:
            alpha.responses.create(input=FOLLOW_UP, previous_response_id=first.id, **request)
        assert refused.value.code == "previous_response_not_found"


def test_a_forced_function_call_and_its_output_continue_the_conversation(embedded: Embedded, sdk: Sdk) -> None:
    forced = {"model": embedded.model, "input": "Where is parcel 7731?", "tools": [TRACK],
              "tool_choice": {"type": "function", "name": "track_parcel"}, "max_output_tokens": 60, **GREEDY}
    call, direct_call = (sdk(origin).responses.create(**forced) for origin in (embedded.proxy, embedded.engine))
    (item,) = call.output
    assert (item.type, item.name, call.status) == ("function_call", "track_parcel", "completed")
    assert item.arguments == direct_call.output[0].arguments
    assert list(json.loads(item.arguments)) == ["reasoning", "parcel_id"]  # the parameters' order

    result = {"type": "function_call_output", "call_id": item.call_id, "output": '{"status": "in transit"}'}
    request = {"model": embedded.model, "tools": [TRACK], "max_output_tokens": 24, **GREEDY}
    answer = sdk(embedded.proxy).responses.create(input=[result], previous_response_id=call.id, **request)
    assert answer.previous_response_id == call.id
    with pytest.raises(openai.NotFoundError):
        sdk(embedded.engine).responses.create(input=[result], previous_response_id=direct_call.id, **request)
    whole = by_hand(sdk(embedded.engine), [{"role": "user", "content": forced["input"]}], call, [result], **request)
    assert answer.output_text == whole.output_text != ""
    assert answer.usage is not None and whole.usage is not None
    assert answer.usage.input_tokens == whole.usage.input_tokens


@function_tool
def track_parcel(parcel_id: Annotated[str, Field(pattern="^[0-9]{1,6}$")]) -> str:
    """Where a parcel is now."""
    return f"Parcel {parcel_id} is in transit."


async def test_an_openai_agent_runs_through_prefixgate_and_continues_by_previous_response_id(
        embedded: Embedded) -> None:
    """The OpenAI Agents SDK on its defaults (the Responses API, its own request shapes), unchanged. Its run fails
    on an ``incomplete`` response, and the tiny model never ends free text in time, so the agent answers in a
    structured ``output_type`` and its tool's argument has a pattern: both close by grammar. Its first turn is
    forced to call the tool (the SDK sets tool choice back to auto after a tool call), so each run is a tool round
    trip: a forced call, the tool's output sent back, a structured answer."""
    set_tracing_disabled(True)
    async with AsyncExitStack() as clients:

        async def agent(origin: str) -> Agent[Any]:
            client = await clients.enter_async_context(
                openai.AsyncOpenAI(base_url=origin + "/v1", api_key="sk-unused", max_retries=0))
            return Agent(name="courier", instructions=INSTRUCTIONS + " Use the tool when a parcel is named.",
                         model=OpenAIResponsesModel(embedded.model, openai_client=client), tools=[track_parcel],
                         model_settings=ModelSettings(max_tokens=80, tool_choice="track_parcel"), output_type=Verdict)

        await runs_both_ways(await agent(embedded.proxy), await agent(embedded.engine))


ROUND_TRIP = ["tool_call_item", "tool_call_output_item", "message_output_item"]


def written(result: RunResultBase) -> str:
    """The text of a run's last message as the model wrote it (before the SDK parsed it)."""
    return ItemHelpers.text_message_output(result.new_items[-1])  # type: ignore[arg-type]


async def runs_both_ways(through: Agent[Any], direct: Agent[Any]) -> None:
    first = await Runner.run(through, QUESTION)
    direct_first = await Runner.run(direct, QUESTION)
    assert first.final_output == direct_first.final_output
    assert written(first) == written(direct_first)
    assert list(json.loads(written(first))) == ["reasoning", "answer"]  # as the output type declares them
    assert [item.type for item in first.new_items] == ROUND_TRIP
    assert first.new_items[0].raw_item.arguments == direct_first.new_items[0].raw_item.arguments
    assert first.last_response_id is not None

    streamed = Runner.run_streamed(through, QUESTION)
    kinds = [event.item.type async for event in streamed.stream_events() if event.type == "run_item_stream_event"]
    assert kinds == ROUND_TRIP
    assert streamed.final_output == first.final_output and written(streamed) == written(first)

    # continued from the streamed run: the gateway kept its response from the stream's last event
    second = await Runner.run(through, FOLLOW_UP, previous_response_id=streamed.last_response_id)
    with pytest.raises(openai.NotFoundError):
        await Runner.run(direct, FOLLOW_UP, previous_response_id=direct_first.last_response_id)
    # straight to the engine, the SDK's own client-side way: the first run's items sent again with the follow-up
    continued = await Runner.run(direct, [*direct_first.to_input_list(), {"role": "user", "content": FOLLOW_UP}])
    assert [item.type for item in second.new_items] == [item.type for item in continued.new_items] == ROUND_TRIP
    assert isinstance(second.final_output, Verdict)
    assert second.final_output == continued.final_output and written(second) == written(continued)
