#!/usr/bin/env bash
# prefix_reuse.py against a real vLLM GPU engine (issue 3's GPU run), on a machine with one NVIDIA GPU.
#
# The GPU machines used here have torch and no network, so everything else arrives as files:
#   KIT     a vLLM GPU kit: KIT/site.tar.xz (vLLM and its small dependencies, unpacked onto PYTHONPATH)
#           and KIT/model/ (config + tokenizer for --load-format dummy: random weights, real shapes)
#   WHEELS  wheels of prefixgate's own dependencies the machine lacks (orjson, aiocache, qdrant-client...)
#   OUT     where the engine log, the docs block, the JSON numbers and the plot go
# The engine gets the tiny CPU model's chat template (proxy/engine/tiny_model.py), which renders the tool
# schema into the prompt, so workload (b) sends the same text on both engines.
#
#   KIT=.gpu WHEELS=.whl OUT=/tmp/out bash tests/bench/gpu_prefix_reuse.sh [prefix_reuse.py options]
set -u
KIT=${KIT:-.gpu}
WHEELS=${WHEELS:-.whl}
OUT=${OUT:-/tmp/prefix-reuse-gpu}
SITE=${SITE:-/tmp/vllm-site}
GATEWAY_SITE=${GATEWAY_SITE:-/tmp/prefixgate-site}
PORT=${PORT:-8000}
source tests/bench/gpu_kit.sh
prepare || exit 1

template=$(mktemp --suffix=.jinja)
python3 -c "import sys; sys.path.insert(0, '.'); from proxy.engine.tiny_model import CHAT_TEMPLATE; sys.stdout.write(CHAT_TEMPLATE)" \
  > "$template" || exit 1

start_engine() {  # extra vllm flags...
  VLLM_SERVER_DEV_MODE=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONPATH="$SITE" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 setsid python3 -m vllm.entrypoints.cli.main serve "$KIT/model" \
    --served-model-name prefixgate-gpu --load-format dummy --max-model-len 4096 --enable-prefix-caching \
    --enable-prompt-tokens-details --chat-template "$template" --host 127.0.0.1 --port "$PORT" "$@" \
    >> "$OUT/engine.log" 2>&1 &
  ENGINE_PID=$!
  for _ in $(seq 1 170); do
    kill -0 "$ENGINE_PID" 2>/dev/null || return 1
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" 2>/dev/null \
      && return 0
    sleep 2
  done
  return 1
}
stop_engine() { kill -- -"$ENGINE_PID" 2>/dev/null; sleep 3; kill -9 -- -"$ENGINE_PID" 2>/dev/null; }

if ! start_engine; then
  elapsed "engine failed; retrying with --enforce-eager"; tail -30 "$OUT/engine.log"; stop_engine
  start_engine --enforce-eager || { tail -60 "$OUT/engine.log"; stop_engine; exit 1; }
fi
elapsed "engine healthy"

export PYTHONPATH="$GATEWAY_SITE:$SITE" PYTHONUNBUFFERED=1
timeout "${BENCH_TIMEOUT:-420}" python3 tests/bench/prefix_reuse.py --engine "http://127.0.0.1:$PORT" \
  --model prefixgate-gpu --name prefix_reuse_gpu --out "$OUT/benchmarks.md" \
  --where "one $gpu (vLLM $vllm_version, $model_shapes); engine, gateway and client on one machine: $host_cpu" \
  "$@"
status=$?
elapsed "bench exit $status"
python3 tests/bench/prompt_cost.py --runs 2000 | tee "$OUT/prompt_cost.txt"
stop_engine
exit $status
