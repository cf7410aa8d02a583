#!/usr/bin/env bash
# GPU smoke test of the vLLM path: a small local model, vLLM rollouts, 10 FlashREINFORCE updates, then
# rollout and training tokens/s and the measured policy lag. Budget: ≤ 8 minutes on one GPU.
#
#   pip install torch && pip install -e ".[scale,vllm]"          # a CUDA torch and vLLM ≥ 0.10.2
#   bash scale/examples/gpu_smoke.sh /path/to/Qwen2.5-0.5B-Instruct [OUT]
#
# MODEL_DIR must be a local directory (config.json, safetensors, tokenizer): nothing is downloaded.
# The synthetic arithmetic prompts are used without warm-up and without the calculator (rollout.tools is
# off unless asked for).
set -euo pipefail
MODEL_DIR=${1:?usage: gpu_smoke.sh MODEL_DIR [OUT]}
OUT=${2:-runs/gpu_smoke}
export VLLM_ENABLE_V1_MULTIPROCESSING=0   # the engine core in this process: weights reloaded in place
mkdir -p "$OUT"

python -m scale train --model "$MODEL_DIR" --engine vllm --out "$OUT" \
  --set model.device=cuda --set model.dtype=bfloat16 \
  --set warmup.steps=0 --set rollout.max_new_tokens=256 \
  --set train.updates=10 --set train.batch_size=64 --set train.microbatch_size=16 --set train.learning_rate=1e-6 \
  --set loop.trajectories_per_call=32 --set loop.queue_size=64 --set loop.threads=null \
  --set data.num_test=128 --set eval.every=10 --set eval.greedy=false \
  --set log.checkpoint_every=0 --set log.progress=false > "$OUT/train_stdout.json"

python - "$OUT" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(f"{sys.argv[1]}/metrics.jsonl") if line.strip()]
steps = [r for r in rows if "lag/mean" in r]
tokens = sum(r["rollout/length"] * r["rollout/trajectories"] for r in steps)
elapsed = steps[-1]["time/elapsed_s"]
learner = sum(r["time/learn_s"] for r in steps)
print(f"updates: {len(steps)}  rollout tokens: {tokens:.0f}  wall: {elapsed:.1f} s")
print(f"rollout tokens/s (over the RL wall time): {tokens / elapsed:,.0f}")
print(f"training tokens/s (learner steps only): {tokens / learner:,.0f}")
print(f"policy lag: mean {sum(r['lag/mean'] for r in steps) / len(steps):.2f}, max {max(r['lag/max'] for r in steps):.0f}")
print(f"accuracy: {rows[0].get('eval/accuracy')} -> {rows[-1].get('eval/accuracy')}")
PY
