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
mkdir -p "$OUT" "$SITE"
started=$(date +%s)
elapsed() { echo "[t=$(( $(date +%s) - started ))s] $*"; }

[ -f "$SITE/.done" ] || { tar -C "$SITE" -xJf "$KIT/site.tar.xz" && touch "$SITE/.done"; } || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$GATEWAY_SITE" \
  "$WHEELS"/*.whl || exit 1
elapsed "unpacked"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# The caption is read from the machine, the kit and the model files, never typed: GPU, vLLM version,
# the model's shapes, and the CPU that engine, gateway and client share.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
vllm_version=$(PYTHONPATH="$SITE" python3 -c "import importlib.metadata as m; print(m.version('vllm'))") || exit 1
model_shapes=$(python3 - "$KIT/model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
print(f"{c.get('architectures', ['model'])[0]} shapes ({c['num_hidden_layers']} layers, hidden size "
      f"{c['hidden_size']}) with random weights, {c['vocab_size']:,}-token vocabulary")
PY
) || exit 1
host_cpu=$(python3 -c "import sys; sys.path.insert(0, '.'); from tests.bench.machine import cpu; print(cpu())") || exit 1
echo "caption: one $gpu (vLLM $vllm_version, $model_shapes); $host_cpu"

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
