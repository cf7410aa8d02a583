"""The GPU smoke test's Python steps (``scale/examples/gpu_smoke.sh`` runs them; nothing is downloaded).

    python scale/examples/gpu_smoke.py model --out OUT --device cuda   # OUT/model: a tiny Llama + tokenizer
    python scale/examples/gpu_smoke.py scale --out OUT --device cuda   # scale train on it under torchrun
    python scale/examples/gpu_smoke.py trl --out OUT --device cuda     # FlashReinforceTrainer on it (vLLM on GPU)
    python scale/examples/gpu_smoke.py report --out OUT --device cuda  # OUT/gpu_smoke.json

``model`` builds a character-level Hugging Face tokenizer and a Llama from a config (``build_tiny_model``, head
dimension 32, which vLLM's attention accepts) and saves both, so scale's ``--model`` and TRL load the same
directory. ``scale`` runs ``python -m scale train --model OUT/model`` under ``torchrun`` with the FSDP2 learner
(``learner.parallel=fsdp``: one rank per GPU — a group of one on a single GPU — and 2 gloo ranks on a CPU) and, on
a GPU, the vLLM engine (the transformers engine on a CPU), recording the process tree's peak RSS and, on a GPU, the
peak GPU memory nvidia-smi reports. ``trl`` trains :class:`flashsim.integrations.trl.FlashReinforceTrainer` with
one rollout per prompt on two-digit products (reward 1 when the first integer of the completion is the product; a
random model scores ~0, so this measures speed and the log-prob agreement, not learning) with TRL's colocated vLLM
on a GPU and its transformers generation on a CPU. ``report`` reads scale's ``metrics.jsonl`` and the TRL step's
``trl.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

from scale.testing import free_port

SIZES = {"cuda": {"hidden_size": 256, "num_layers": 4, "num_heads": 8, "intermediate_size": 1024, "batch": 64,
                  "updates": 5, "max_new_tokens": 32},
         "cpu": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128, "batch": 8,
                 "updates": 2, "max_new_tokens": 8}}
"""Model and TRL run sizes per device (the shell script passes scale the same batch and budget)."""
def build_smoke_model(out: Path, device: str) -> None:
    from scale.learner.model import save_tiny_pretrained

    size = SIZES[device]
    save_tiny_pretrained(out / "model", hidden_size=size["hidden_size"], num_layers=size["num_layers"],
                         num_heads=size["num_heads"], intermediate_size=size["intermediate_size"], seed=0)


def _scale_sets(device: str) -> list[str]:
    size = SIZES[device]
    sets = ["learner.parallel=fsdp", "warmup.steps=0", f"train.batch_size={size['batch']}",
            f"train.updates={size['updates']}", f"rollout.max_new_tokens={size['max_new_tokens']}",
            "rollout.tools=false", "data.num_train=256", "data.num_test=16", f"eval.every={size['updates']}",
            "eval.greedy=false", "log.progress=false", "log.checkpoint_every=0", "log.curves=false"]
    if device == "cuda":
        return [*sets, "rollout.engine=vllm", "model.device=cuda", "model.dtype=bfloat16", "loop.threads=null",
                "train.learning_rate=1e-5"]
    return [*sets, "loop.mode=sync", "train.learning_rate=1e-3"]


def train_scale(out: Path, device: str) -> None:
    """``python -m scale train`` under ``torchrun``; its peak memory into ``OUT/scale_rusage.json``."""
    import torch

    ranks = torch.cuda.device_count() if device == "cuda" else 2
    port = free_port()
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(ranks),
               "--master-port", port, "-m", "scale", "train", "--config", "tiny_cpu", "--model", str(out / "model"),
               "--out", str(out / "scale"), *[x for s in _scale_sets(device) for x in ("--set", s)]]
    gpu_peak, done = [0.0], threading.Event()

    def poll_gpu() -> None:  # the engine and the learner share the GPU: nvidia-smi sees both
        while not done.wait(0.5):
            used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True).stdout.split()
            gpu_peak[0] = max([gpu_peak[0], *map(float, used)])

    if device == "cuda":
        threading.Thread(target=poll_gpu, daemon=True).start()
    with open(out / "scale_stdout.txt", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    done.set()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"scale train failed: {' '.join(command)} (log: {out / 'scale_stdout.txt'})")
    peak = {"peak_memory_mb": gpu_peak[0] if device == "cuda" else usage.ru_maxrss / 1024,
            "peak_rss_mb": usage.ru_maxrss / 1024, "ranks": ranks}
    (out / "scale_rusage.json").write_text(json.dumps(peak))


def _peak_memory_mb(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def train_trl(out: Path, device: str) -> None:
    if device == "cpu":  # TRL generates with transformers here, but imports vLLM (and Ray) whenever installed:
        sys.modules.setdefault("vllm", None)  # hidden from its check, half of this step's start-up on 2 cores
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from flashsim.integrations.trl import FlashReinforceConfig, FlashReinforceTrainer

    size, rng = SIZES[device], random.Random(0)
    pairs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(size["batch"] * size["updates"])]
    data = Dataset.from_list([{"prompt": f"{a}*{b}=", "answer": str(a * b)} for a, b in pairs])

    def reward(completions, answer, **_):
        return [float(c.split("=")[0].strip().split(" ")[0] == a) for c, a in zip(completions, answer)]

    gpu = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3, "bf16": True}
    config = FlashReinforceConfig(output_dir=str(out / "trl"), per_device_train_batch_size=size["batch"],
                                  max_completion_length=size["max_new_tokens"], learning_rate=1e-5,
                                  lr_scheduler_type="constant",
                                  max_steps=size["updates"], logging_steps=1, save_strategy="no", report_to=[],
                                  use_cpu=device == "cpu", seed=0, disable_tqdm=True, dataloader_num_workers=0,
                                  gradient_checkpointing=False, **(gpu if device == "cuda" else {"bf16": False}))
    model = AutoModelForCausalLM.from_pretrained(out / "model", dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    tokenizer.padding_side = "left"
    trainer = FlashReinforceTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=data,
                                    processing_class=tokenizer)
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    rows = [row for row in trainer.state.log_history if "trust/acceptance_rate" in row]
    tokens = sum(row["completions/mean_length"] * size["batch"] for row in rows)
    result = {"updates": len(rows), "s_per_update": wall / max(len(rows), 1), "tokens_per_s": tokens / wall,
              "peak_memory_mb": _peak_memory_mb(device)}
    if device == "cuda":
        result.update(generation="vllm colocate", **_agreement([(r["trust/ratio_max"], r["trust/sequence_kl"])
                                                                  for r in rows]))
    else:  # TRL's transformers generation stores no sampling log-probs: μ is the learner's own, ratio 1 by design
        result.update(generation="transformers", logprob_agreement=None)
    (out / "trl.json").write_text(json.dumps(result, indent=1))


def _agreement(rows: list[tuple[float, float]]) -> dict[str, float]:
    """The sampler's vs the learner's log-probs on the sampled tokens, from the loss's stats at lag 0."""
    return {"logprob_agreement": {"max_ratio": max(r for r, _ in rows), "max_sequence_kl": max(k for _, k in rows)}}


def report(out: Path, device: str) -> None:
    rows = [json.loads(line) for line in (out / "scale" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [row for row in rows if "time/learn_s" in row and row["update"] >= 1]
    tokens = sum(row["rollout/length"] * row["rollout/trajectories"] for row in steps)
    elapsed = steps[-1]["time/elapsed_s"]
    log_ratio = max(max(abs(math.log(row["trust/ratio_min"])), abs(math.log(row["trust/ratio_max"])))
                    for row in steps)
    scale = {"updates": len(steps), "s_per_update": elapsed / len(steps), "tokens_per_s": tokens / elapsed,
             "learner_tokens_per_s": tokens / sum(row["time/learn_s"] for row in steps),
             **json.loads((out / "scale_rusage.json").read_text()),
             "logprob_agreement": {"max_abs_log_ratio": log_ratio,
                                   "max_sequence_kl": max(row["trust/sequence_kl_max"] for row in steps)}}
    result = {"device": device, "scale": scale, "trl": json.loads((out / "trl.json").read_text())}
    (out / "gpu_smoke.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("model", "scale", "trl", "report"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=tuple(SIZES), required=True)
    args = parser.parse_args(argv)
    steps = {"model": build_smoke_model, "scale": train_scale, "trl": train_trl, "report": report}
    steps[args.step](args.out, args.device)


if __name__ == "__main__":
    main()
