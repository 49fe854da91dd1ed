#!/usr/bin/env bash
# length_routing.py on two real vLLM GPU engines sharing one NVIDIA GPU: one pool, the oracle and predicted splits,
# start short / continue long, and both of those with priority hints, each layout sent the same arrivals.
#
# The GPU machines used here have torch and no network, so everything else arrives as files (as for
# gpu_routing.sh):
#   KIT     a vLLM GPU kit: KIT/site.tar.xz (vLLM and its small dependencies, unpacked onto PYTHONPATH)
#           and KIT/model/ (config, tokenizer and chat template for --load-format dummy: random weights,
#           real shapes)
#   WHEELS  wheels of prefixgate's own dependencies the machine lacks
#   OUT     where the JSON numbers (length_routing_gpu.json), the block (benchmarks.md), the engines' log and this
#           script's log go; `length_routing.py --render OUT/length_routing_gpu.json` writes the tables into docs/
#
#   KIT=.gpu WHEELS=.whl OUT=/tmp/out bash tests/bench/gpu_length_routing.sh
#
# Why these settings:
# - Each engine gets SLOTS (16) batch slots and KV memory for SLOTS full-length sequences (16 x 4,096 tokens), so a
#   request waits for a slot, never for KV memory: long answers hold slots as on a busy GPU, the effect length routing
#   is for.
# - EAGER=1 (the default) starts the engines with --enforce-eager: both healthy ~90 s after launch. Two eager engines
#   sharing the GPU were measured at ~60 ms per decode step at batch 16 (~550 output tokens/s for the two), so at any
#   rate worth measuring every layout is a backlog, and draining 1,024-token answers outlasts one device command.
#   EAGER=0 leaves the flag out: CUDA graphs and torch.compile (the kit measured ~3.9 ms per step at batch 1, one
#   engine alone, and ~95 s from launch to healthy cold, ~38 s of it compiling). The two engines compile at once,
#   each in its own COMPILE_CACHE folder; count on ~100-150 s. The caption says which mode ran.
# - RATES (default 16,10) rest on a step of ~10 ms at batch 16 with two engines taking turns on one GPU, what compiled
#   engines are expected to take (eager ones are ~6x slower: see above): each engine writes ~1,600 tokens/s and the
#   two ~3,200. The workload's answers average 224 tokens (capped at 1,024; the 26 % over 256 tokens carry 75 % of
#   them), so one pool's 32 slots fill at ~14 arrivals/s. 16/s congests it (~115 %; ~160 % if a step takes 14 ms,
#   ~70 % if 6 ms), where the oracle's gain shows; 10/s is busy but mostly below it (~70 %). A split's long pool,
#   16 slots for 75 % of the tokens, is congested at both. The congested rate goes first: where the time left holds
#   one pass only, it is that one (length_routing.py starts no pass that would not end within --budget).
# - WARMUP/WINDOW: 6 layouts x 2 rates of (6 + 10 s of arrivals + ~10 s to start the gateway and drain) come to
#   ~310 s, what DEADLINE leaves after the kit is unpacked (~30 s) and the engines are healthy (~90 s): one pass per
#   rate. Longer windows or more passes need more time than one device command (600 s) has.
# - Compiled engines (EAGER=0) in one device command of ~540 s: the ~10 ms step at batch 16 is then the expected
#   figure, so one congested rate and the three layouts that answer the question, as many passes as fit:
#     EAGER=0 RATES=16 WARMUP=6 WINDOW=10 PASSES=3 DEADLINE=510 RESERVE=20 \
#       LAYOUTS='one pool;oracle split;start short, continue long'
#   A layout's run at 16/s: ~2 s to start its gateway, 16 s of arrivals, then the drain: one pool (~112 %) ends
#   ~2 s of backlog plus the last long answer (up to 1,024 steps, ~10 s); a split's long pool (~168 %: 16/s x 75 %
#   x 224 tokens against 1,600 tokens/s) ends ~11 s of backlog plus that answer: ~30-40 s a layout, ~105 s a pass
#   of three. Engines healthy at ~150 s leave --budget ~340 s: three passes where the estimate holds, two where a
#   step takes ~14 ms or the compile runs long (a pass that would not end within the budget is not started).
set -u
KIT=${KIT:-.gpu}
WHEELS=${WHEELS:-.whl}
OUT=${OUT:-/tmp/length-routing-gpu}
SITE=${SITE:-/tmp/vllm-site}
GATEWAY_SITE=${GATEWAY_SITE:-/tmp/prefixgate-site}
DEADLINE=${DEADLINE:-500}  # seconds from the start by which the bench is done and the engines are stopping
RESERVE=${RESERVE:-25}     # seconds kept back for stopping the engines and the last pass running over its estimate
SLOTS=${SLOTS:-16}
KV_TOKENS=${KV_TOKENS:-65536}  # per engine: SLOTS x --max-model-len
RATES=${RATES:-16,10}
WARMUP=${WARMUP:-6}
WINDOW=${WINDOW:-10}
PASSES=${PASSES:-3}  # as many as the budget holds
LAYOUTS=${LAYOUTS:-}   # a ';' list; empty: all six
PORT=${PORT:-8000}
EAGER=${EAGER:-1}      # 1: --enforce-eager; 0: CUDA graphs and torch.compile (see above)
COMPILE_CACHE=${COMPILE_CACHE:-/tmp/vllm-compile-cache}  # engine i compiles into COMPILE_CACHE/enginei
source tests/bench/gpu_kit.sh
prepare || exit 1
PYTHONPATH="$GATEWAY_SITE:$SITE" python3 -c "import proxy.commands.cli, tests.bench.length_routing" || exit 1
token_bytes=$(python3 - "$KIT/model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
head = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
print(c["num_hidden_layers"] * c["num_key_value_heads"] * head * 2 * 2)  # K and V of every layer, bf16
PY
) || exit 1

if [ "$EAGER" = 0 ]; then
  eager_flag="" mode="CUDA graphs and torch.compile"
else
  eager_flag="--enforce-eager" mode="--enforce-eager"
fi

PIDS=()
start_engines() {  # both at once, so their starts overlap
  for i in 0 1; do
    # each engine its own compile cache (unused when eager), so two cold compiles never write one folder
    VLLM_CACHE_ROOT="$COMPILE_CACHE/engine$i" \
    VLLM_SERVER_DEV_MODE=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONPATH="$SITE" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 setsid python3 -m vllm.entrypoints.cli.main serve "$KIT/model" \
      --served-model-name prefixgate-gpu --load-format dummy --max-model-len 4096 --enable-prefix-caching \
      $eager_flag --gpu-memory-utilization 0.4 --kv-cache-memory-bytes $(( KV_TOKENS * token_bytes )) \
      --max-num-seqs "$SLOTS" --scheduling-policy priority --host 127.0.0.1 --port $(( PORT + i )) \
      > "$OUT/engine$i.log" 2>&1 &
    PIDS+=($!)
  done
  for i in 0 1; do
    for _ in $(seq 1 120); do
      kill -0 "${PIDS[$i]}" 2>/dev/null || { tail -40 "$OUT/engine$i.log"; return 1; }
      python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$(( PORT + i ))/health', timeout=2)" \
        2>/dev/null && continue 2
      sleep 2
    done
    tail -40 "$OUT/engine$i.log"; return 1
  done
  grep -ho "GPU KV cache size: [0-9,]* tokens" "$OUT/engine0.log" | tail -1
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
}
stop_engines() {
  [ ${#PIDS[@]} -gt 0 ] || return 0
  for pid in "${PIDS[@]}"; do kill -- -"$pid" 2>/dev/null; done
  sleep 5
  for pid in "${PIDS[@]}"; do kill -9 -- -"$pid" 2>/dev/null; done
  for i in 0 1; do [ -f "$OUT/engine$i.log" ] && cat "$OUT/engine$i.log" >> "$OUT/engines.log" && rm -f "$OUT/engine$i.log"; done
  PIDS=()
}
trap stop_engines EXIT

start_engines || exit 1
elapsed "engines healthy"
budget=$(( DEADLINE - ($(date +%s) - started) - RESERVE ))
[ "$budget" -gt 60 ] || { elapsed "only ${budget} s left for the bench"; exit 1; }
urls="http://127.0.0.1:$PORT,http://127.0.0.1:$(( PORT + 1 ))"
# length_routing.py writes its result after every pass, so what a timeout cuts short keeps the passes done
PYTHONPATH="$GATEWAY_SITE:$SITE" PYTHONUNBUFFERED=1 timeout $(( budget + 60 )) python3 tests/bench/length_routing.py \
  --budget "$budget" --engine-urls "$urls" --model prefixgate-gpu --max-num-seqs "$SLOTS" --rates "$RATES" \
  --warmup "$WARMUP" --seconds "$WINDOW" --passes "$PASSES" ${LAYOUTS:+--layouts "$LAYOUTS"} \
  --name length_routing_gpu --out "$OUT/benchmarks.md" \
  --where "one $gpu shared by 2 engines (vLLM $vllm_version, $model_shapes; $mode; $KV_TOKENS KV tokens and $SLOTS batch slots per engine); engines, gateways, shims and client on one machine: $host_cpu" \
  2>&1 | tee "$OUT/bench.log"
status=${PIPESTATUS[0]}
elapsed "bench exit $status"
stop_engines
elapsed "done"
exit "$status"
