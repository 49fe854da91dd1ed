#!/bin/bash
# The agent-session replay on a lent GPU (the device tool), with vLLM 0.25.0 from the GPU kit (KIT, built by the
# kit's build_kit.sh: Qwen3-4B layer shapes, dummy weights) serving the Qwen-shaped template in templates/.
# Run from the repository root with the kit and the prepared requests carried:
#   bash tests/bench/gpu_agent_replay.sh   (KIT=.gpu, REQUESTS=bench-out/agent_requests.jsonl.gz, results in $OUT)
set -u
KIT=${KIT:-.gpu}
REQUESTS=${REQUESTS:-bench-out/agent_requests.jsonl.gz}
OUT=${OUT:-bench-out}
SITE=${SITE:-$HOME/.cache/vllm-site}
mkdir -p "$SITE" "$OUT"
[ -f "$SITE/.done" ] || { tar -C "$SITE" -xJf "$KIT/site.tar.xz" && touch "$SITE/.done"; }
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONPATH=$SITE HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
       PYTHONUNBUFFERED=1 VLLM_SERVER_DEV_MODE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
setsid python3 -m vllm.entrypoints.cli.main serve "$KIT/model" --served-model-name m --load-format dummy \
  --max-model-len 40960 --enable-prefix-caching --enable-prompt-tokens-details \
  --chat-template tests/bench/templates/qwen_style.jinja --enable-auto-tool-choice --tool-call-parser pythonic \
  --host 127.0.0.1 --port 8000 > "$OUT/engine.log" 2>&1 &
ENGINE=$!
for _ in $(seq 1 200); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2)" 2>/dev/null && break
  kill -0 $ENGINE 2>/dev/null || { tail -40 "$OUT/engine.log"; exit 1; }
  sleep 2
done
python3 tests/bench/agent_replay.py replay --requests "$REQUESTS" --engine http://127.0.0.1:8000 --model m \
  --rounds "${ROUNDS:-3}" --reset --out "$OUT/agent_replay_gpu.json" > "$OUT/replay.log" 2>&1
status=$?
tail -5 "$OUT/replay.log"
python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['summary'], indent=1))" "$OUT/agent_replay_gpu.json"
kill -- -$ENGINE 2>/dev/null
exit $status
