"""The libraries apps point at OpenAI-compatible servers, each on its defaults and unchanged, against the real
engine: through prefixgate and straight to vLLM, the same answer.

- instructor: structured output by a forced tool call (its default mode, ``TOOLS``);
- LangChain's ``ChatOpenAI.with_structured_output``: structured output by ``response_format`` (its default
  method, ``json_schema``, strict);
- a Pydantic AI agent with a function tool, over two turns (the second carries the first's messages); the tiny
  model never chooses to call the tool, so the tool rides along in each prompt, as the template renders it.

The engine is greedy unless asked otherwise (the ``embedded`` fixture), as none of them sends a temperature.
Each client's HTTP answers are recorded, so a test can read what the model wrote before the library parsed
it: the fields in the order the app's model declares them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import instructor
import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.support.embedded import Embedded

pytestmark = pytest.mark.engine


class Verdict(BaseModel):
    """Reasoning first, on purpose; "reasoning" sorts after "answer". Patterns keep the tiny model's junk short."""

    reasoning: str = Field(pattern="^[a-z ]{1,16}$")
    answer: str = Field(pattern="^[a-z ]{1,8}$")


QUESTION = "Is parcel 7731 late? Think first."


class Recorder:
    """The JSON answers an HTTP client received, in order."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = []

    def sync_client(self) -> httpx.Client:
        return httpx.Client(event_hooks={"response": [self._record]})

    def async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(event_hooks={"response": [self._record_async]})

    def _record(self, response: httpx.Response) -> None:
        response.read()
        self.answers.append(response.json())

    async def _record_async(self, response: httpx.Response) -> None:
        await response.aread()
        self.answers.append(response.json())

    def written(self) -> list[str]:
        """What the model wrote in each answer: its content, else its tool calls' arguments."""
        message = [answer["choices"][0]["message"] for answer in self.answers]
        return [m["content"] or "".join(c["function"]["arguments"] for c in m["tool_calls"]) for m in message]


def both_ways(embedded: Embedded, run: Callable[[str, httpx.Client], Any]) -> tuple[Any, Any, Recorder]:
    """``run(base_url, http_client)`` through prefixgate, then straight to the engine."""
    results, recorders = [], []
    for origin in (embedded.proxy, embedded.engine):
        recorder = Recorder()
        with recorder.sync_client() as http:
            results.append(run(origin + "/v1", http))
        recorders.append(recorder)
    assert recorders[0].written() == recorders[1].written()
    return results[0], results[1], recorders[0]


def test_instructor_gets_the_engines_structured_answer_fields_in_order(embedded: Embedded) -> None:
    def run(base_url: str, http: httpx.Client) -> dict[str, Any]:
        client = instructor.from_openai(openai.OpenAI(base_url=base_url, api_key="sk-unused", http_client=http))
        return client.chat.completions.create(model=embedded.model, response_model=Verdict, max_tokens=80,
                                              messages=[{"role": "user", "content": QUESTION}]).model_dump()

    through, direct, recorded = both_ways(embedded, run)
    assert through == direct
    assert list(json.loads(recorded.written()[0])) == ["reasoning", "answer"]


def test_langchain_structured_output_is_the_engines_fields_in_order(embedded: Embedded) -> None:
    def run(base_url: str, http: httpx.Client) -> dict[str, Any]:
        model = ChatOpenAI(model=embedded.model, base_url=base_url, api_key="sk-unused", max_tokens=80,
                           http_client=http)
        return model.with_structured_output(Verdict).invoke(QUESTION).model_dump()

    through, direct, recorded = both_ways(embedded, run)
    assert through == direct
    assert list(json.loads(recorded.written()[0])) == ["reasoning", "answer"]


async def test_a_pydantic_ai_agent_with_a_tool_gets_the_engines_answers_over_two_turns(embedded: Embedded) -> None:
    def track_parcel(reasoning: str, parcel_id: str) -> str:
        """Where a parcel is now."""
        return f"{parcel_id}: in transit"

    async def run(base_url: str, recorder: Recorder) -> list[str]:
        async with recorder.async_client() as http:
            client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-unused", http_client=http)
            agent = Agent(OpenAIChatModel(embedded.model, provider=OpenAIProvider(openai_client=client)),
                          instructions="You track parcels for a courier. Use the tool when a parcel is named.",
                          tools=[track_parcel], model_settings={"max_tokens": 24})
            first = await agent.run(QUESTION)
            second = await agent.run("And tomorrow?", message_history=first.all_messages())
        return [first.output, second.output]

    through, direct = Recorder(), Recorder()
    assert await run(embedded.proxy + "/v1", through) == await run(embedded.engine + "/v1", direct)
    assert through.written() == direct.written() and len(through.answers) == 2
    prompt_tokens = [[answer["usage"]["prompt_tokens"] for answer in side.answers] for side in (through, direct)]
    assert prompt_tokens[0] == prompt_tokens[1]  # the engine read prompts of the same length both ways
    first, second = prompt_tokens[0]
    assert second > first  # the second turn carried the first
