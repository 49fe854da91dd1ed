#!/usr/bin/env bash
# routing.py's prefix-affinity comparison on four real vLLM GPU engines sharing one NVIDIA GPU: round-robin,
# prefixgate's ring, routing by the engines' KV events, and four gateway processes; first with KV caches that
# hold every prompt, then with caches of a quarter of the prompts' tokens (as the CPU run's 160 blocks of 128
# tokens are), with four batch slots each.
#
# The GPU machines used here have torch and no network, so everything else arrives as files (as for
# gpu_prefix_reuse.sh):
#   KIT     a vLLM GPU kit: KIT/site.tar.xz (vLLM and its small dependencies, unpacked onto PYTHONPATH)
#           and KIT/model/ (config, tokenizer and chat template for --load-format dummy: random weights,
#           real shapes); the gateways read prompts' tokens with the same folder
#   WHEELS  wheels of prefixgate's own dependencies the machine lacks
#   OUT     where each phase's JSON numbers (routing_kv_gpu.json, routing_kv_gpu_constrained.json), the
#           engines' log and this script's log go; `routing.py --render OUT/NAME.json` writes the tables
#           and plots into docs/ afterwards
#
#   KIT=.gpu WHEELS=.whl OUT=/tmp/out bash tests/bench/gpu_routing.sh
set -u
KIT=${KIT:-.gpu}
WHEELS=${WHEELS:-.whl}
OUT=${OUT:-/tmp/routing-gpu}
SITE=${SITE:-/tmp/vllm-site}
GATEWAY_SITE=${GATEWAY_SITE:-/tmp/prefixgate-site}
AMPLE_TOKENS=${AMPLE_TOKENS:-147456}  # KV tokens per engine: every prompt of the workload (~106k) fits
SMALL_TOKENS=${SMALL_TOKENS:-26800}   # a quarter of the prompts' tokens, as on the CPU (20,480 of 80,811)
DEADLINE=${DEADLINE:-570}  # seconds from the start by which both phases are done (a device command's limit)
AMPLE_CASES=${AMPLE_CASES:-"round-robin;prefixgate;prefixgate, KV events;prefixgate, KV events, four processes"}
SMALL_CASES=${SMALL_CASES:-"round-robin;prefixgate;prefixgate, KV events"}
PHASES=${PHASES:-"ample small"}  # which phases run: "ample" alone gives its passes the whole DEADLINE
source tests/bench/gpu_kit.sh
prepare || exit 1
PYTHONPATH="$GATEWAY_SITE:$SITE" python3 -c "import proxy.commands.cli, proxy.kv_events.routing, tests.bench.routing" \
  || exit 1
token_bytes=$(python3 - "$KIT/model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
head = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
print(c["num_hidden_layers"] * c["num_key_value_heads"] * head * 2 * 2)  # K and V of every layer, bf16
PY
) || exit 1

PIDS=()
start_engines() {  # first port, KV tokens per engine, batch slots
  local first=$1 tokens=$2 slots=$3
  PIDS=()
  for i in 0 1 2 3; do
    VLLM_SERVER_DEV_MODE=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONPATH="$SITE" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 setsid python3 -m vllm.entrypoints.cli.main serve "$KIT/model" \
      --served-model-name prefixgate-gpu --load-format dummy --max-model-len 4096 --enable-prefix-caching \
      --enforce-eager --gpu-memory-utilization 0.2 --kv-cache-memory-bytes $(( tokens * token_bytes )) \
      --max-num-seqs "$slots" --host 127.0.0.1 --port $(( first + i )) \
      --kv-events-config "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:$(( first + 100 + i ))\", \"topic\": \"kv\"}" \
      > "$OUT/engine$i.log" 2>&1 &
    PIDS+=($!)
  done
  for i in 0 1 2 3; do
    for _ in $(seq 1 120); do
      kill -0 "${PIDS[$i]}" 2>/dev/null || { tail -40 "$OUT/engine$i.log"; return 1; }
      python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$(( first + i ))/health', timeout=2)" \
        2>/dev/null && continue 2
      sleep 2
    done
    tail -40 "$OUT/engine$i.log"; return 1
  done
  grep -ho "GPU KV cache size: [0-9,]* tokens" "$OUT/engine0.log" | tail -1
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
}
stop_engines() {
  for pid in "${PIDS[@]}"; do kill -- -"$pid" 2>/dev/null; done
  sleep 5
  for pid in "${PIDS[@]}"; do kill -9 -- -"$pid" 2>/dev/null; done
  for i in 0 1 2 3; do cat "$OUT/engine$i.log" >> "$OUT/engines.log"; rm -f "$OUT/engine$i.log"; done
}
phase() {  # name, first port, KV tokens, batch slots, cases, share of the time left for its passes, seconds kept back
  local name=$1 first=$2 tokens=$3 slots=$4 cases=$5 share=$6 reserve=$7
  start_engines "$first" "$tokens" "$slots" || { stop_engines; return 1; }
  elapsed "$name: engines healthy"
  # routing.py starts no pass that would not end within its budget; passes done are reported (>= 3 wanted)
  local budget=$(( (DEADLINE - ($(date +%s) - started) - reserve) * share / 100 ))
  local urls="" events=""
  for i in 0 1 2 3; do
    urls+="${urls:+,}http://127.0.0.1:$(( first + i ))"
    events+="${events:+,}tcp://127.0.0.1:$(( first + 100 + i ))"
  done
  PYTHONPATH="$GATEWAY_SITE:$SITE" PYTHONUNBUFFERED=1 timeout $(( budget + 60 )) python3 tests/bench/routing.py --budget "$budget" \
    --only affinity --kv-events --engine-urls "$urls" --kv-endpoints "$events" --model prefixgate-gpu \
    --tokenizer "$KIT/model" --max-num-seqs "$slots" --cases "$cases" --name "$name" --out "$OUT/benchmarks.md" \
    --where "one $gpu shared by 4 engines (vLLM $vllm_version, $model_shapes; --enforce-eager; $tokens KV tokens of 16-token blocks and $slots batch slots per engine); engines, gateways and client on one machine: $host_cpu"
  elapsed "$name: bench exit $?"
  stop_engines
}

case " $PHASES " in *" small "*) share=55 reserve=100 ;; *) share=100 reserve=40 ;; esac  # 100 s: the next start
case " $PHASES " in *" ample "*) phase routing_kv_gpu 8000 "$AMPLE_TOKENS" 256 "$AMPLE_CASES" "$share" "$reserve" ;; esac
case " $PHASES " in *" small "*) phase routing_kv_gpu_constrained 8010 "$SMALL_TOKENS" 4 "$SMALL_CASES" 100 40 ;; esac
elapsed "done"
