"""/metrics of a gateway with several uvicorn workers: whichever worker a scrape reaches, it reports
every worker's requests, their in-flight load added up, and counts that never go back when a
worker dies and uvicorn replaces it."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
import psutil

from tests.support.configs import pool
from tests.support.fake_server import FakeServer
from tests.support.gateways import gateway_processes
from tests.support.metrics_text import sample_sum
from tests.support.waiting import wait_until

REQUESTS = 40
CHAT = "/chat/completions"


def _chat(origin: str, **extra: object) -> int:
    body = {"model": "fake-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], **extra}
    with httpx.Client(timeout=30) as client:  # a connection each, so the workers share the requests
        return client.post(origin + "/v1/chat/completions", json=body).status_code


def _scrape(origin: str) -> str:
    with httpx.Client(timeout=10) as client:
        return client.get(origin + "/metrics").text


def _workers(gateway_pid: int) -> list[psutil.Process]:
    """The gateway's live uvicorn workers (a killed one is a zombie until uvicorn reaps it)."""
    workers = []
    for child in psutil.Process(gateway_pid).children():
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                workers.append(child)
        except psutil.Error:
            continue
    return workers


def _gateway_pid(port: int) -> int:
    for connection in psutil.net_connections("tcp"):
        if connection.laddr and connection.laddr.port == port and connection.status == psutil.CONN_LISTEN:
            if connection.pid is not None:
                parent = psutil.Process(connection.pid)
                return parent.ppid() if "spawn_main" in " ".join(parent.cmdline()) else parent.pid
    raise AssertionError("no process listens on the gateway's port")


def test_every_scrape_reports_all_workers_traffic_and_load(fake: FakeServer, tmp_path: Path) -> None:
    config = {"server": {"workers": 2},
              "pools": [pool("p", fake.base_url, engine_metrics={"interval": 0.2})]}
    with gateway_processes(config, tmp_path, 1) as (origin,):
        statuses = [_chat(origin, stream=turn % 2 == 0) for turn in range(REQUESTS)]
        assert statuses == [200] * REQUESTS
        scrapes = [_scrape(origin) for _ in range(12)]
        for text in scrapes:
            assert sample_sum(text, "prefixgate_requests_total", route=CHAT, status="200") == REQUESTS
            assert sample_sum(text, "prefixgate_time_to_first_token_seconds_count") == REQUESTS // 2
            assert sample_sum(text, "prefixgate_replica_choices_total", reason="single") == REQUESTS
        # Both workers are live and read the engine: one series of their own each.
        wait_until(lambda: len({s for s in _scrape(origin).splitlines()
                                if s.startswith("prefixgate_engine_others_requests{")}) == 2,
                   timeout=10, interval=0.1, what="a series of its own from each worker's engine reading")

        # A slow request held by one worker shows in flight in every worker's answer.
        slow = threading.Thread(target=_chat, args=(origin,), kwargs={"fake_delay_ms": 4000})
        slow.start()
        try:
            in_flight = [0.0] * 6
            wait_until(lambda: sample_sum(_scrape(origin), "prefixgate_replica_in_flight") == 1, timeout=3,
                       interval=0.1, what="the slow request to show in flight")
            for index in range(len(in_flight)):
                in_flight[index] = sample_sum(_scrape(origin), "prefixgate_replica_in_flight")
        finally:
            slow.join()
        assert in_flight == [1.0] * len(in_flight)
        wait_until(lambda: sample_sum(_scrape(origin), "prefixgate_replica_in_flight") == 0, timeout=3,
                   interval=0.1, what="nothing in flight once the slow request ended")

        # A worker killed and replaced: the counts it made stay, its live series go.
        gateway = _gateway_pid(int(origin.rsplit(":", 1)[1]))
        workers = _workers(gateway)
        assert len(workers) == 2
        killed = workers[0].pid
        workers[0].send_signal(signal.SIGKILL)
        wait_until(lambda: len(_workers(gateway)) == 2 and killed not in {w.pid for w in _workers(gateway)},
                   timeout=30, interval=0.1, what="uvicorn to replace the killed worker")
        wait_until(lambda: f'pid="{killed}"' not in _scrape(origin), timeout=15, interval=0.1,
                   what="the killed worker's series to leave /metrics")
        for _ in range(6):
            text = _scrape(origin)
            assert sample_sum(text, "prefixgate_requests_total", route=CHAT, status="200") == REQUESTS + 1
