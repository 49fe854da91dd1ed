"""Each limit on a request's shape is a setting, and a refusal names it (413 for size, 400 else)."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.support.configs import pool
from tests.support.fake_server import FakeServer


def test_each_input_limit_is_configurable_and_named_in_its_refusal(fake: FakeServer,
                                                                   start_proxy: Callable[..., str]) -> None:
    proxy = start_proxy({"pools": [pool("p", fake.base_url)], "server": {
        "max_body_bytes": 4096, "max_json_depth": 10, "max_messages": 5, "max_content_chars": 100,
        "max_inputs": 3}})

    def post(path: str, body: bytes) -> httpx.Response:
        return httpx.post(proxy + path, content=body, headers={"content-type": "application/json"}, timeout=10)

    def chat(messages: str, extra: str = "") -> httpx.Response:
        return post("/v1/chat/completions", f'{{"model": "fake-model", "messages": {messages}{extra}}}'.encode())

    hi = '{"role": "user", "content": "hi"}'
    assert chat(f"[{', '.join([hi] * 5)}]", ', "max_tokens": 2').status_code == 200
    refusals = {
        "server.max_messages": chat(f"[{', '.join([hi] * 6)}]"),
        "server.max_content_chars": chat(f'[{{"role": "user", "content": "{"x" * 101}"}}]'),
        "server.max_json_depth": chat(f"[{hi}]", ', "metadata": ' + "[" * 10 + "]" * 10),
        "server.max_inputs": post("/v1/embeddings", b'{"model": "fake-model", "input": ["a", "b", "c", "d"]}'),
    }
    for setting, answer in refusals.items():
        assert answer.status_code == 400, (setting, answer.text)
        assert setting in answer.json()["error"]["message"], answer.text
    too_big = chat(f'[{{"role": "user", "content": "{"x" * 5000}"}}]')
    assert too_big.status_code == 413 and "4096 bytes (server.max_body_bytes)" in too_big.json()["error"]["message"]
    assert fake.app.stats.last_body is not None and len(fake.app.stats.last_body["messages"]) == 5  # only the first
