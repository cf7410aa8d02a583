#!/usr/bin/env bash
# Smoke test that needs nothing but the installed packages: builds its own tiny model and tokenizer (no download,
# no model directory), trains it with scale/ (the vLLM engine and the FSDP2 learner under torchrun), then with
# flashsim's TRL integration (FlashReinforceTrainer, TRL's colocated vLLM), and writes OUT/gpu_smoke.json:
# tokens/s, seconds per update, peak memory, and the sampler's vs the learner's log-prob agreement.
# Budget: <= 5 minutes on one GPU.
#
#   pip install torch && pip install -e ".[scale,vllm,conformance]"   # a CUDA torch, vLLM, TRL
#   bash scale/examples/gpu_smoke.sh --out runs/gpu_smoke
#   bash scale/examples/gpu_smoke.sh --cpu --out runs/cpu_smoke      # the same on a CPU: the transformers
#                                                                     # engine, 2 gloo FSDP ranks, smaller sizes
set -euo pipefail
DEVICE=cuda
OUT=runs/gpu_smoke
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpu) DEVICE=cpu; shift ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    *) echo "usage: gpu_smoke.sh [--cpu] [--out OUT]" >&2; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
export VLLM_ENABLE_V1_MULTIPROCESSING=0   # the engine core in this process: weights reloaded in place
mkdir -p "$OUT"
for step in model scale trl report; do
  python "$HERE/gpu_smoke.py" "$step" --out "$OUT" --device "$DEVICE"
done
