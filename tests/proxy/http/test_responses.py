"""POST /v1/responses through the gateway in memory: what the engine receives (canonical instructions, the
note, the tenant's salt, the output cap), the answer relayed as it came (whole, or SSE to its last event),
conversations the gateway keeps (``previous_response_id`` sent as the whole conversation, GET and DELETE),
and the tenant's token budget settled with the Responses API's usage names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from policies.prompt.cache_salt import tenant_salt
from policies.prompt.prompt import NOTE_HEADER
from tests.support.clock import FakeClock
from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.in_memory import in_memory_gateway
from tests.support.metrics_text import sample_sum
from tests.support.mock_transport import MockReply, MockUpstreams

A = "http://a:8000/v1"
ACME, GLOBEX, INITECH = "sk-acme-0123456789", "sk-globex-0123456789", "sk-initech-0123456789"
SECRET = "salt-secret-0123456789"
INSTRUCTIONS = "You are a planner.  \r\nCurrent time: 2026-11-22 11:51:13 UTC\r\nPlan well."
CANONICAL = "You are a planner.\nPlan well."
NOTE = f"{NOTE_HEADER}\nCurrent time: 2026-11-22 11:51:13 UTC"
USAGE = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 7,
         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 18}
QUIET = {"models": ["m"], "health": {"interval": 0}, "engine_metrics": {"interval": 0}}
HOSTED = {"name": "hosted", "kind": "litellm", "models": ["hosted"], "litellm_model": "openai/model",
          "api_base": "http://hosted.invalid/v1", "api_key": "sk-provider"}
ENGINE_ERROR = {"error": {"message": "'input' is too long", "type": "BadRequestError", "param": "input", "code": 400}}


def _event(kind: str, sequence: int, **data: Any) -> bytes:
    return f"event: {kind}\ndata: ".encode() + orjson.dumps({**data, "sequence_number": sequence,
                                                            "type": kind}) + b"\n\n"


class Engine:
    """vLLM's Responses API in memory, its JSON in vLLM's field order: each answer a new id ("resp_1",
    "resp_2"...) and the text "Answer N."; a stream is its events, the last one cut in two across chunks
    (``last_event=False``: a stream that ends without it). Like vLLM without a store of its own, it
    refuses a ``previous_response_id``."""

    def __init__(self) -> None:
        self.answered = 0
        self.last_event = True
        self.error = False
        # The last event is cut in two this many bytes into the first of these bytes in it (by default
        # "event: response.co" | "mpleted\ndata: ..."), or with ``piece``, into pieces of that many bytes.
        self.cut = (b"event: ", 11)
        self.piece = 0
        self.text: str | None = None  # the answer's text, in place of "Answer N."

    def response(self, request: dict[str, Any], status: str = "completed") -> dict[str, Any]:
        number = self.answered
        message = {"id": f"msg_{number}", "type": "message", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": self.text or f"Answer {number}.", "annotations": []}]}
        return {"id": f"resp_{number}", "created_at": 1764000000, "incomplete_details": None,
                "instructions": request.get("instructions"), "metadata": None, "model": request["model"],
                "object": "response", "output": [message] if status == "completed" else [],
                "parallel_tool_calls": True, "tools": request.get("tools", []), "background": False,
                "max_output_tokens": request.get("max_output_tokens"), "previous_response_id": None,
                "status": status, "usage": USAGE if status == "completed" else None}

    def __call__(self, url: str, body: bytes) -> MockReply:
        request = orjson.loads(body)
        if self.error:
            return MockReply.json(ENGINE_ERROR, 400)
        if "previous_response_id" in request:
            return MockReply.json({"error": {"message": "not found", "type": "invalid_request_error",
                                             "param": "previous_response_id", "code": 404}}, 404)
        self.answered += 1
        if not request.get("stream"):
            return MockReply.json(self.response(request))
        final = self.response(request)
        chunks = [_event("response.created", 0, response=self.response(request, "in_progress")),
                  _event("response.output_text.delta", 1, item_id=f"msg_{self.answered}", output_index=0,
                         content_index=0, delta=self.text or f"Answer {self.answered}.")]
        if self.last_event:
            last = _event("response.completed", 2, response=final)
            at = last.index(self.cut[0]) + self.cut[1]
            size = self.piece
            chunks += [last[i:i + size] for i in range(0, len(last), size)] if size else [last[:at], last[at:]]
        return MockReply(200, chunks, content_type="text/event-stream")


@pytest.fixture
def engine() -> Engine:
    return Engine()


@pytest.fixture
def upstreams(engine: Engine) -> MockUpstreams:
    return MockUpstreams(engine)


@pytest.fixture
def client(upstreams: MockUpstreams, tmp_path: Path) -> Iterator[TestClient]:
    config = {
        "pools": [pool("p", A, **QUIET), HOSTED],
        "auth": {"keys": [{"tenant": "acme", "key": ACME}, {"tenant": "globex", "key": GLOBEX},
                          {"tenant": "initech", "key": INITECH}], "cache_salt_secret": SECRET},
        "limits": {"max_tokens": 64, "default_max_tokens": 32},
        "tenants": {"acme": {"answer_cache": {"ttl_s": 600}}, "globex": {"limits": {"max_tokens_action": "reject"}},
                    "initech": {"prompt": {"scope": "history"}}},
    }
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        yield client


def _create(client: TestClient, key: str = ACME, **fields: Any) -> httpx.Response:
    body = {"model": "m", "instructions": INSTRUCTIONS, "input": "Plan my day.", **fields}
    return client.post("/v1/responses", json=body, headers={"Authorization": f"Bearer {key}"})


def _get(client: TestClient, response_id: str, key: str = ACME) -> httpx.Response:
    return client.get(f"/v1/responses/{response_id}", headers={"Authorization": f"Bearer {key}"})


def _delete(client: TestClient, response_id: str, key: str = ACME) -> httpx.Response:
    return client.delete(f"/v1/responses/{response_id}", headers={"Authorization": f"Bearer {key}"})


def _sent(upstreams: MockUpstreams, index: int = -1) -> dict[str, Any]:
    return orjson.loads(upstreams.posts()[index].body)


def _events(answer: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each SSE event; an event without a name (an error) is named ''."""
    found = []
    for block in answer.content.split(b"\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(b": ", 1) for line in block.split(b"\n"))
        found.append(((lines.get(b"event") or b"").decode(), orjson.loads(lines[b"data"])))
    return found


def _completed(answer: httpx.Response) -> dict[str, Any]:
    """The response a stream ended with (its last event's), or a whole answer's."""
    if not answer.headers["content-type"].startswith("text/event-stream"):
        return answer.json()
    name, data = _events(answer)[-1]
    assert name == "response.completed", _events(answer)
    return data["response"]


def test_the_engine_receives_canonical_instructions_the_note_and_the_tenants_salt(
        client: TestClient, upstreams: MockUpstreams) -> None:
    answer = _create(client)
    assert answer.status_code == 200 and answer.json()["output"][0]["content"][0]["text"] == "Answer 1."
    assert answer.headers["x-prefixgate-relocated"] == "1" and answer.headers["x-prefixgate-volatile"] == "1"
    assert upstreams.posts()[-1].url == A + "/responses"
    sent = _sent(upstreams)
    assert sent["instructions"] == CANONICAL
    assert sent["input"] == f"Plan my day.\n\n{NOTE}"  # a string stays a string
    assert sent["cache_salt"] == tenant_salt(SECRET.encode(), "acme")
    assert _create(client, GLOBEX).status_code == 200
    assert _sent(upstreams)["cache_salt"] == tenant_salt(SECRET.encode(), "globex") != sent["cache_salt"]


def test_a_list_inputs_note_is_an_input_text_part_and_tools_pass_in_their_order(
        client: TestClient, upstreams: MockUpstreams) -> None:
    tools = [{"type": "function", "name": "zeta", "parameters": {"type": "object", "properties": {
        "z": {"type": "string"}, "a": {"type": "string"}}}}, {"type": "function", "name": "alpha"}]
    text = {"format": {"type": "json_schema", "name": "plan", "schema": {"type": "object", "properties": {
        "reasoning": {"type": "string"}, "answer": {"type": "string"}}}}}
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Plan my day."}]}]
    assert _create(client, input=items, tools=tools, text=text).status_code == 200
    sent = upstreams.posts()[-1].body
    assert orjson.loads(sent)["input"] == [{"role": "user", "content": [
        {"type": "input_text", "text": "Plan my day."}, {"type": "input_text", "text": NOTE}]}]
    assert orjson.dumps(tools) in sent and orjson.dumps(text) in sent  # byte for byte, in the app's order


def test_the_output_cap_is_max_output_tokens_defaulted_and_clamped_by_the_limits(
        client: TestClient, upstreams: MockUpstreams) -> None:
    assert _create(client).status_code == 200
    sent = _sent(upstreams)
    assert sent["max_output_tokens"] == 32 and "max_tokens" not in sent  # limits.default_max_tokens
    assert _create(client, max_output_tokens=1000).status_code == 200
    assert _sent(upstreams)["max_output_tokens"] == 64  # limits.max_tokens
    assert _create(client, max_output_tokens=5).status_code == 200
    assert _sent(upstreams)["max_output_tokens"] == 5
    refused = _create(client, GLOBEX, max_output_tokens=1000)  # globex's action is reject
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "max_output_tokens"
    assert refused.json()["error"]["code"] == "max_tokens_above_limit"
    assert len(upstreams.posts()) == 3


def test_a_stream_is_relayed_event_for_event_to_its_last_without_stream_options(
        client: TestClient, upstreams: MockUpstreams) -> None:
    answer = _create(client, stream=True)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    sent = _sent(upstreams)
    assert sent["stream"] is True and "stream_options" not in sent  # a Responses stream carries its usage
    assert [name for name, _ in _events(answer)] == ["response.created", "response.output_text.delta",
                                                     "response.completed"]
    assert b"[DONE]" not in answer.content and b'"error"' not in answer.content
    assert _completed(answer)["usage"]["output_tokens"] == 7  # the client sees the usage the engine sent
    assert _get(client, "resp_1").json() == _completed(answer)


def test_a_stream_that_ends_without_its_last_event_ends_with_an_error_event(
        client: TestClient, engine: Engine) -> None:
    engine.last_event = False
    answer = _create(client, stream=True)
    assert answer.status_code == 200
    name, data = _events(answer)[-1]
    assert name == "" and data["error"]["code"] == "upstream_broken", answer.content
    assert _get(client, "resp_1").status_code == 404  # an unfinished response is not kept


@pytest.mark.parametrize("last_event", [True, False], ids=["whole", "cut after the text"])
def test_an_answer_that_writes_the_end_marker_in_its_text_is_read_to_its_real_end(
        client: TestClient, engine: Engine, last_event: bool) -> None:
    """Text that quotes an SSE event (here the last one's name) is JSON inside a delta, not an event: the stream
    ends at the real last event, whose response is kept; one cut before it ends with an error event."""
    engine.text = 'A stream ends with "\nevent: response.completed\ndata: {}\n\n" in SSE.'
    engine.last_event = last_event
    answer = _create(client, stream=True)
    assert answer.status_code == 200
    if last_event:
        assert _completed(answer)["output"][0]["content"][0]["text"] == engine.text
        assert _get(client, "resp_1").json() == _completed(answer)
    else:
        name, data = _events(answer)[-1]
        assert name == "" and data["error"]["code"] == "upstream_broken", answer.content
        assert _get(client, "resp_1").status_code == 404


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_continued_turn_sends_the_whole_conversation_and_answers_with_the_previous_id(
        client: TestClient, upstreams: MockUpstreams, stream: bool) -> None:
    first = _create(client, stream=stream)
    assert first.status_code == 200 and _completed(first)["previous_response_id"] is None
    first_input = _sent(upstreams)["input"]
    first_output = _completed(first)["output"]
    second = _create(client, stream=stream, instructions="Be brief.", input="And tomorrow?",
                     previous_response_id="resp_1")
    assert second.status_code == 200, second.text
    sent = _sent(upstreams)
    assert "previous_response_id" not in sent and sent["instructions"] == "Be brief."  # no carry-over
    assert sent["input"] == [{"role": "user", "content": first_input}, *first_output,
                             {"role": "user", "content": "And tomorrow?"}]
    assert _completed(second)["id"] == "resp_2" and _completed(second)["previous_response_id"] == "resp_1"
    if stream:  # every event that names it says so, the first as well as the last
        assert _events(second)[0][1]["response"]["previous_response_id"] == "resp_1"
    assert _get(client, "resp_2").json()["previous_response_id"] == "resp_1"
    third = _create(client, stream=stream, instructions="Be brief.", input="And the day after?",
                    previous_response_id="resp_2")
    assert third.status_code == 200
    assert _sent(upstreams)["input"] == [*sent["input"], *_completed(second)["output"],
                                         {"role": "user", "content": "And the day after?"}]


@pytest.mark.parametrize("into", [1, 12, 22, 26])
def test_a_previous_id_cut_in_two_across_chunks_is_still_put_back(client: TestClient, engine: Engine,
                                                                     into: int) -> None:
    """An engine's TCP reads cut a long event anywhere, the field that names the previous response too."""
    assert _create(client).status_code == 200
    field = b'"previous_response_id":null'
    engine.cut = (field, into)
    answer = _create(client, stream=True, input="And tomorrow?", previous_response_id="resp_1")
    assert field not in answer.content and _completed(answer)["previous_response_id"] == "resp_1"
    assert _get(client, "resp_2").json()["previous_response_id"] == "resp_1"


def test_a_last_event_read_a_few_bytes_at_a_time_still_ends_the_stream_and_is_kept(
        client: TestClient, engine: Engine) -> None:
    assert _create(client).status_code == 200
    engine.piece = 3
    answer = _create(client, stream=True, input="And tomorrow?", previous_response_id="resp_1")
    assert _completed(answer)["previous_response_id"] == "resp_1" and _completed(answer)["usage"] == USAGE
    assert _get(client, "resp_2").json() == _completed(answer)


@pytest.mark.parametrize("key", [ACME, INITECH], ids=["system scope", "history scope"])
def test_only_this_turns_input_is_rewritten_history_stays_as_it_was_sent(
        client: TestClient, upstreams: MockUpstreams, key: str) -> None:
    """Earlier turns are sent again exactly as the engine saw them, so their prefix is the one it cached:
    even for a tenant whose rewrite reaches past the system text into earlier turns (initech,
    ``prompt.scope: history``), where the first turn's note, its clock and all, is an earlier turn now."""
    assert _create(client, key).status_code == 200
    history = _sent(upstreams)["input"]
    assert history.endswith(NOTE)  # the first turn's note, sent then
    again = "Current time: 2026-11-23 08:00:00 UTC\nPlan well."
    answer = _create(client, key, instructions=again, input="And tomorrow?", previous_response_id="resp_1")
    assert answer.status_code == 200 and answer.headers["x-prefixgate-relocated"] == "1"
    sent = _sent(upstreams)
    assert sent["input"][0] == {"role": "user", "content": history}  # byte for byte as the engine saw it
    assert sent["input"][-1] == {"role": "user", "content": "And tomorrow?\n\n"
                                 f"{NOTE_HEADER}\nCurrent time: 2026-11-23 08:00:00 UTC"}
    assert sent["instructions"] == "Plan well."


def test_get_answers_the_stored_response_and_delete_forgets_it(client: TestClient, upstreams: MockUpstreams) -> None:
    created = _create(client)
    fetched = _get(client, "resp_1")
    assert fetched.status_code == 200 and fetched.json() == created.json()
    deleted = _delete(client, "resp_1")
    assert deleted.status_code == 200
    assert deleted.json() == {"id": "resp_1", "object": "response", "deleted": True}
    gone = _get(client, "resp_1")
    assert gone.status_code == 404
    assert gone.json()["error"]["message"] == "Response with id 'resp_1' not found."
    assert _delete(client, "resp_1").status_code == 404
    continued = _create(client, input="And tomorrow?", previous_response_id="resp_1")
    assert continued.status_code == 404 and continued.json()["error"]["code"] == "previous_response_not_found"
    assert len(upstreams.posts()) == 1  # the engine never saw the refused turn
    assert len(upstreams.calls) == len(upstreams.posts())  # GET and DELETE are answered by the gateway


def _conversation(clock: FakeClock, tmp_path: Path, engine: Engine, **server: Any) -> Iterator[TestClient]:
    config = {"pools": [pool("p", A, **QUIET)], "auth": {"keys": [{"tenant": "acme", "key": ACME}]},
              "prompt": {"volatile": "keep"}, "server": server}
    return in_memory_gateway(config, MockUpstreams(engine), clock, tmp_path)


def test_a_long_conversation_is_stored_once_and_recalled_whole(engine: Engine, tmp_path: Path) -> None:
    """Each stored turn keeps what it added, linked to the turns before: twelve turns store twelve inputs, not
    1 + 2 + ... + 12, and the twelfth is still sent the whole conversation, in order."""
    with _conversation(FakeClock(), tmp_path, engine) as client:
        previous = None
        for turn in range(1, 13):
            extra = {"previous_response_id": previous} if previous else {}
            answer = _create(client, input=f"Turn {turn}.", **extra)
            assert answer.status_code == 200, answer.text
            previous = answer.json()["id"]
        store = client.app_state["gateway"].responses
        kept = [orjson.loads(raw) for raw in store.entries.values()]
        assert len(kept) == 12 and all(len(entry["input"]) == 1 for entry in kept)
        assert max(len(entry["earlier"]) for entry in kept) == 11
        sent = orjson.loads(engine_calls(client)[-1])["input"]
        assert [item["content"] for item in sent[::2]] == [f"Turn {turn}." for turn in range(1, 13)]
        assert [item["content"][0]["text"] for item in sent[1::2]] == [f"Answer {n}." for n in range(1, 12)]


def engine_calls(client: TestClient) -> list[bytes]:
    return [call.body for call in client.app_state["gateway"].upstreams.by_name["p"].replicas[0].transport.calls
            if call.method == "POST"]


def test_a_conversation_whose_earlier_turn_is_gone_or_too_long_is_refused_naming_it(
        engine: Engine, tmp_path: Path) -> None:
    with _conversation(FakeClock(), tmp_path, engine, max_messages=6) as client:
        ids = []
        for turn in range(3):
            extra = {"previous_response_id": ids[-1]} if ids else {}
            answer = _create(client, input=f"Turn {turn}.", **extra)
            assert answer.status_code == 200, answer.text
            ids.append(answer.json()["id"])
        too_long = _create(client, input="Turn 3.", previous_response_id=ids[-1])  # 6 before it, 7 with it
        assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "conversation_too_long"
        assert too_long.json()["error"]["param"] == "previous_response_id"
        assert _delete(client, ids[0]).status_code == 200
        gone = _create(client, input="Again.", previous_response_id=ids[1])
        assert gone.status_code == 404 and ids[0] in gone.json()["error"]["message"]


def test_a_conversation_lasts_as_long_as_it_is_continued(engine: Engine, tmp_path: Path) -> None:
    """Its turns are kept responses.ttl_s from the last time it was continued, as a self-contained last turn was:
    a conversation continued every 20 days of a 30-day TTL goes on, its first turn read each time."""
    clock = FakeClock()
    with _conversation(clock, tmp_path, engine) as client:
        previous = _create(client, input="Turn 0.").json()["id"]
        for turn in range(1, 4):
            clock.advance(20 * 86_400)
            answer = _create(client, input=f"Turn {turn}.", previous_response_id=previous)
            assert answer.status_code == 200, answer.text
            previous = answer.json()["id"]
        clock.advance(31 * 86_400)
        assert _create(client, input="Late.", previous_response_id=previous).status_code == 404


def test_a_response_stored_before_turns_were_linked_is_continued(engine: Engine, tmp_path: Path) -> None:
    """An entry of the older form holds its whole conversation's input and no links: it is continued as it was."""
    with _conversation(FakeClock(), tmp_path, engine) as client:
        store = client.app_state["gateway"].responses
        output = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Two."}]}]
        old = {"input": [{"role": "user", "content": "One."}, {"role": "user", "content": "Two?"}],
               "response": {"id": "resp_old", "status": "completed", "output": output}}
        store.entries[("acme", "resp_old")] = orjson.dumps(old)
        answer = _create(client, input="Three?", previous_response_id="resp_old")
        assert answer.status_code == 200, answer.text
        assert orjson.loads(engine_calls(client)[-1])["input"] == [*old["input"], *output,
                                                                    {"role": "user", "content": "Three?"}]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_store_false_keeps_nothing_to_fetch_or_continue(client: TestClient, stream: bool) -> None:
    answer = _create(client, store=False, stream=stream)
    assert answer.status_code == 200 and _completed(answer)["id"] == "resp_1"
    assert _get(client, "resp_1").status_code == 404
    continued = _create(client, input="And tomorrow?", previous_response_id="resp_1")
    assert continued.status_code == 404 and continued.json()["error"]["code"] == "previous_response_not_found"


def test_an_unknown_previous_id_is_a_404_naming_the_field_and_reaches_no_engine(
        client: TestClient, upstreams: MockUpstreams) -> None:
    answer = _create(client, previous_response_id="resp_never")
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["param"] == "previous_response_id" and error["code"] == "previous_response_not_found"
    assert error["message"] == "Previous response with id 'resp_never' not found."
    assert upstreams.posts() == []


def test_another_tenant_cannot_fetch_delete_or_continue_a_response(client: TestClient,
                                                                   upstreams: MockUpstreams) -> None:
    assert _create(client).status_code == 200
    unknown = _get(client, "resp_never", GLOBEX)
    assert _get(client, "resp_1", GLOBEX).json() == {**unknown.json(), "error": {
        **unknown.json()["error"], "message": "Response with id 'resp_1' not found."}}
    assert _get(client, "resp_1", GLOBEX).status_code == _delete(client, "resp_1", GLOBEX).status_code == 404
    continued = _create(client, GLOBEX, input="Go on.", previous_response_id="resp_1")
    assert continued.status_code == 404 and continued.json()["error"]["code"] == "previous_response_not_found"
    assert len(upstreams.posts()) == 1
    assert _get(client, "resp_1").status_code == 200  # acme's is still there


def test_get_and_delete_need_a_valid_key(client: TestClient) -> None:
    assert _create(client).status_code == 200
    assert client.get("/v1/responses/resp_1").status_code == 401
    assert _get(client, "resp_1", "sk-nobody-0123456789").status_code == 401
    assert client.delete("/v1/responses/resp_1").status_code == 401
    assert _get(client, "resp_1").status_code == 200


def test_an_engine_error_is_relayed_as_it_came(client: TestClient, engine: Engine) -> None:
    engine.error = True
    answer = _create(client)
    assert answer.status_code == 400 and answer.json() == ENGINE_ERROR


def test_an_exact_repeat_is_a_new_response_never_one_from_the_answer_cache(
        client: TestClient, upstreams: MockUpstreams) -> None:
    """acme stores answers for exact deterministic repeats; a Responses turn is still a response of its own,
    with an id of its own to continue."""
    first, again = (_create(client, temperature=0) for _ in range(2))
    assert first.json()["id"] == "resp_1" and again.json()["id"] == "resp_2"
    assert "x-prefixgate-answer-cache" not in again.headers and len(upstreams.posts()) == 2


def test_a_litellm_pool_refuses_the_responses_api(client: TestClient, upstreams: MockUpstreams) -> None:
    answer = _create(client, model="hosted")
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "unsupported_endpoint" and error["param"] == "model" and "hosted" in error["message"]
    assert upstreams.posts() == []


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m"}, "input"),
    ({"model": "m", "input": [{"role": "user", "content": "hi"}, {"content": "x"}]}, "input[1].role"),
    ({"model": "m", "input": "hi", "background": True}, "background"),
    ({"model": "m", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
])
def test_an_invalid_body_is_a_400_naming_the_param(client: TestClient, upstreams: MockUpstreams,
                                                   body: dict[str, Any], param: str) -> None:
    answer = client.post("/v1/responses", json=body, headers={"Authorization": f"Bearer {ACME}"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param
    assert upstreams.posts() == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_tenants_token_budget_is_settled_with_input_and_output_tokens(
        upstreams: MockUpstreams, tmp_path: Path, stream: bool) -> None:
    """Each turn reserves its prompt and max_output_tokens (500) of 10,000 a minute and uses 18 (11 input,
    7 output): the next identical request finds exactly 18 fewer tokens left."""
    config = {"pools": [pool("p", A, **QUIET)], "auth": {"keys": [{"tenant": "acme", "key": ACME}]},
              "limits": {"tokens_per_minute": 10_000}}
    with in_memory_gateway(config, upstreams, FakeClock(), tmp_path) as client:
        remaining = []
        for _ in range(3):
            answer = _create(client, stream=stream, max_output_tokens=500)
            assert answer.status_code == 200
            remaining.append(int(answer.headers["x-ratelimit-remaining-tokens"]))
        metrics = client.get("/metrics").text
    assert [before - after for before, after in pairwise(remaining)] == [18, 18]
    assert sample_sum(metrics, "prefixgate_tokens_total", tenant="acme", kind="prompt") == 33
    assert sample_sum(metrics, "prefixgate_tokens_total", tenant="acme", kind="completion") == 21


def test_over_real_sockets_a_stream_is_kept_and_one_without_its_last_event_ends_in_an_error(
        fake: FakeServer, start_proxy: Callable[..., str]) -> None:
    """The same through the aiohttp transport and a real server, whose reads cut events where they fall."""
    gateway = start_proxy({"pools": [pool("p", fake.base_url)]})
    body = {"model": "fake-model", "input": "Plan my day.", "max_output_tokens": 40, "stream": True}
    whole = httpx.post(gateway + "/v1/responses", json=body, timeout=30)
    response = _completed(whole)
    assert response["status"] == "completed" and response["usage"]["output_tokens"] == 40
    assert httpx.get(f"{gateway}/v1/responses/{response['id']}", timeout=30).json() == response
    cut = httpx.post(gateway + "/v1/responses", json={**body, "model": "fake-nodone"}, timeout=30)
    assert cut.status_code == 200 and _events(cut)[-1][1]["error"]["code"] == "upstream_broken"
