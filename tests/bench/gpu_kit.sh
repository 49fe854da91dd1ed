# Sourced by the GPU benchmark scripts (gpu_prefix_reuse.sh, gpu_routing.sh), run from the repository root:
# unpacks the vLLM kit and installs prefixgate's wheels, then reads the caption's facts from the machine,
# the kit and the model files, never typed: the GPU, vLLM's version, the model's shapes, and the CPU that
# engines, gateways and client share.
# Needs KIT, WHEELS, OUT, SITE and GATEWAY_SITE; `prepare` sets gpu, vllm_version, model_shapes and host_cpu.

started=$(date +%s)
elapsed() { echo "[t=$(( $(date +%s) - started ))s] $*"; }

prepare() {
  mkdir -p "$OUT" "$SITE"
  unpack_kit || return 1
  elapsed "unpacked"
  read_caption
}

unpack_kit() {
  [ -f "$SITE/.done" ] || { tar -C "$SITE" -xJf "$KIT/site.tar.xz" && touch "$SITE/.done"; } || return 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$GATEWAY_SITE" \
    "$WHEELS"/*.whl
}

read_caption() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  vllm_version=$(PYTHONPATH="$SITE" python3 -c "import importlib.metadata as m; print(m.version('vllm'))") || return 1
  model_shapes=$(python3 - "$KIT/model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
print(f"{c.get('architectures', ['model'])[0]} shapes ({c['num_hidden_layers']} layers, hidden size "
      f"{c['hidden_size']}) with random weights, {c['vocab_size']:,}-token vocabulary")
PY
) || return 1
  host_cpu=$(python3 -c "import sys; sys.path.insert(0, '.'); from tests.bench.machine import cpu; print(cpu())") \
    || return 1
  echo "caption: one $gpu (vLLM $vllm_version, $model_shapes); $host_cpu"
}
