#!/usr/bin/env bash
# Launch one vLLM replica of a pool with the flags prefixgate's routing assumes:
# prefix caching on (the whole point), chunked prefill, a bounded batch.
#   deploy/vllm-pool.sh MODEL PORT [extra vllm flags...]
set -euo pipefail
model=${1:?model path or name}
port=${2:?port}
shift 2
exec vllm serve "$model" \
  --host 0.0.0.0 --port "$port" \
  --enable-prefix-caching \
  --enable-chunked-prefill \
  --max-num-batched-tokens 8192 \
  --gpu-memory-utilization 0.85 \
  "$@"
