#!/usr/bin/env bash
# Launch one vLLM replica of a pool with the flags prefixgate's routing assumes:
# prefix caching on (the whole point), chunked prefill, a bounded batch.
#   deploy/vllm-pool.sh MODEL PORT [extra vllm flags...]
# With KV_EVENTS_PORT set, the engine also publishes the blocks it caches and evicts there (and keeps
# the recent ones for replay on KV_EVENTS_PORT+1), for a pool with `balance: kv_events`; prefixgate finds
# both at the engine's GET /kv_event_sources. Give every replica of the pool the same PYTHONHASHSEED
# only if you also route by vLLM's own hashes elsewhere: prefixgate matches blocks by their tokens.
set -euo pipefail
model=${1:?model path or name}
port=${2:?port}
shift 2
events=()
if [[ -n "${KV_EVENTS_PORT:-}" ]]; then
  events=(--kv-events-config "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:${KV_EVENTS_PORT}\", \"replay_endpoint\": \"tcp://*:$((KV_EVENTS_PORT + 1))\", \"topic\": \"kv\"}")
fi
exec vllm serve "$model" \
  --host 0.0.0.0 --port "$port" \
  --enable-prefix-caching \
  --enable-chunked-prefill \
  --max-num-batched-tokens 8192 \
  --gpu-memory-utilization 0.85 \
  "${events[@]}" \
  "$@"
