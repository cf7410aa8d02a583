"""Side by side with TRL's ``GRPOTrainer``: one model, task, evaluation set and budget; flashsim's CLI against TRL.

    python benchmarks/bench_vs_trl.py                      # 3 seeds × 2 learning rates × 4 arms, table into
                                                           # docs/performance.md (35 minutes on 2 busy cores)
    python benchmarks/bench_vs_trl.py --quick --no-report  # each arm 2 updates (the CI test)

Needs ``pip install -e ".[scale,conformance]"`` (TRL and its dependencies, pinned by the lock). Nothing is
downloaded: the script builds, under ``--out``:

1. ``model/``: a Hugging Face Llama directory (hidden 64, 2 layers, 4 heads, MLP 256) with a byte-level BPE
   tokenizer trained here on the task's text (digits split one per token) and a chat template, given
   :data:`WARMUP_STEPS` supervised steps on the answers (:func:`scale.run.warmup.warmup`);
2. ``train.jsonl`` / ``test.jsonl``: ``{"messages": [{"role": "user", "content": "Copy 417. The answer is"}],
   "answer": "417"}``, the three-digit numbers split into 700 training prompts and :data:`EVAL_PROMPTS` held-out
   ones (numbers never trained on; :func:`_problems` says why this task);

then runs each arm as its own process, alternately (the order rotates with the repetition), for every seed and
learning rate: 40 updates of 64 rollouts, ≤ 16 new tokens, temperature 1, evaluation on the held-out prompts
(one sample at temperature 1 and one greedy per prompt) before RL and every 5 updates:

- ``flashsim FlashREINFORCE`` and ``flashsim GRPO`` (G = 4): ``python -m scale train --model model/ --data.train
  train.jsonl ...`` as a user types it, with ``--warmup.steps 0`` (the model is already warmed up) and the
  reward :func:`last_integer_reward` by import path;
- ``TRL GRPO`` (G = 4, its default ``loss_type``) at one torch thread and at torch's default thread count: a
  subclass of ``GRPOTrainer`` that only times generation (``_generate_and_score_completions``) and the training
  step, and a callback that runs the same evaluation.

Measured per run: seconds per update split into generation, learner, evaluation and plotting; RL-only seconds
per update (the training loop's wall-clock without evaluation and plotting), rollouts/s and generated tokens/s
from it; peak RSS (``os.wait4``); the whole process's wall-clock; the rollouts and the whole-process seconds to
the first evaluation with held-out accuracy (:data:`THRESHOLD_KEY`: one sample per prompt at temperature 1, the
quantity RL optimizes) ≥ ``--threshold`` (seconds: the whole process less the training after that evaluation, as
if the run had stopped there; the final checkpoint and ``curves.png`` stay counted). The table gives each flashsim
arm's ratio to TRL's best thread setting (per seed and learning rate, then the median and the range).

Differences that remain between the arms are listed in :data:`DIFFERENCES` and printed under the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DIGITS = 3
EVAL_PROMPTS = 200
PROMPT = "Copy {n}. The answer is"
THRESHOLD_KEY = "eval/accuracy"
"""The metric of the threshold: held-out accuracy of one sample per prompt at temperature 1."""
THRESHOLD = 0.5
LEARNING_RATES = (5e-4, 1e-3)
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
SPECIAL = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
WARMUP_STEPS, WARMUP_BATCH, WARMUP_LR = 80, 64, 3e-3
"""Supervised warm-up of the shared model (before any arm: part of the model, not of the runs)."""
GROUP_SIZE = 4
ARMS = ("flash_reinforce", "grpo", "trl_1thread", "trl")
LABELS = {"flash_reinforce": "flashsim FlashREINFORCE", "grpo": "flashsim GRPO (G = 4)",
          "trl_1thread": "TRL GRPO, 1 torch thread", "trl": "TRL GRPO, torch's default threads"}
DIFFERENCES = (
    "Loss: flashsim GRPO (flashsim's choice of settings, which the article does not give: PPO clip 0.2, no KL, "
    "sequence-mean then batch-mean aggregation); "
    "TRL's default `loss_type` aggregates over all tokens of the batch (`dapo`) and its advantages are scaled by "
    "the group's standard deviation as flashsim's are. FlashREINFORCE (G = 1) is flashsim's own algorithm and "
    "has no TRL counterpart; it is compared with TRL GRPO at the same rollouts.",
    "Evaluation: flashsim's evaluation engine samples the evaluation prompts in one batch with its own sampler; "
    "the TRL arm's callback uses `model.generate` (left padding). Both do one sample at temperature 1 and one "
    "greedy completion per prompt, before RL and every `--eval-every` updates.",
    "Activation checkpointing: off on both sides (TRL 1.16 turns `gradient_checkpointing` on by default, which "
    "recomputes the forward pass in the backward; flashsim's `learner.activation_checkpointing` is off by default).",
    "Checkpoints: flashsim writes one after update 0 and one at the end (`--log.checkpoint-every 0`); TRL "
    "saves none (`save_strategy='no'`).",
    "Optimizer: both AdamW (β = 0.9, 0.999, ε = 1e-8, no weight decay, gradient norm clipped at 1, constant "
    "learning rate); TRL's through `transformers.Trainer` (`adamw_torch`).",
    "Evaluation draws: the two samplers are the same distribution (seeded alike, flashsim's engine and "
    "`model.generate` gave identical accuracies on the warmed-up model, 0.255–0.385 over 5 seeds, mean 0.336), "
    "but each side's evaluation draws its own random numbers, and one draw of 200 prompts varies by about "
    "± 0.035 (SD): before RL flashsim's draws read 0.365–0.39 and TRL's 0.28–0.345, so the rollouts to the "
    "threshold carry that evaluation noise.",
    "Threads: flashsim uses its own default (`loop.threads: 1` and the loop its rule picks on CPU); TRL is run "
    "at 1 thread and at torch's default, and the better of the two is the reference.",
)


def last_integer_reward(prompt: Any, response: str, answer: str) -> float:
    """1.0 when the last integer in ``response`` equals ``answer`` (flashsim's reward signature)."""
    found = re.findall(r"-?\d+", response)
    return float(bool(found) and found[-1] == answer.strip())


def _problems() -> tuple[list[dict], list[dict]]:
    """The training prompts and the held-out evaluation prompts: every :data:`DIGITS`-digit number, shuffled,
    :data:`EVAL_PROMPTS` of them held out.

    Why copying and not addition: this model does not learn to add (trained on 761 of the 961 sums
    0 ≤ a, b ≤ 30 it answered ≤ 7 % of the other 200), it memorizes, and RL did not move the memorized sums
    within the budget (the pilot in docs/performance.md). Copying generalizes to unseen numbers: after
    :data:`WARMUP_STEPS` supervised steps the greedy answer is right on nearly every held-out number while one
    sample at temperature 1 is right on about a third (the rest wander off into other digits and byte
    tokens), and RL at temperature 1 sharpens that, a held-out gain every arm can show in 40 updates."""
    import random

    numbers = list(range(10 ** (DIGITS - 1), 10**DIGITS))
    random.Random(0).shuffle(numbers)
    records = [{"messages": [{"role": "user", "content": PROMPT.format(n=n)}], "answer": str(n)} for n in numbers]
    return records[EVAL_PROMPTS:], records[:EVAL_PROMPTS]


def build_assets(out: Path, warmup_steps: int = WARMUP_STEPS) -> Path:
    """Write ``train.jsonl``, ``test.jsonl`` and the warmed-up ``model/`` under ``out``, or reuse them when
    ``assets.json`` says they were built with the same task and warm-up; returns ``out``."""
    model_dir, stamp = out / "model", out / "assets.json"
    built_with = {"prompt": PROMPT, "digits": DIGITS, "eval_prompts": EVAL_PROMPTS,
                  "warmup": [warmup_steps, WARMUP_BATCH, WARMUP_LR]}
    if stamp.exists() and json.loads(stamp.read_text()) == built_with:
        return out
    if out.exists() and any(out.iterdir()):  # another task's or a half-built model must not be measured
        raise ValueError(f"--out: {out} holds assets built with other settings (or none finished); "
                         "give another --out")
    import numpy as np  # here, not above: reusing or refusing assets needs no torch (seconds of imports)
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from scale.rollouts.prompts import PromptExample
    from scale.rollouts.tokenizer import HFTokenizer
    from scale.run.warmup import warmup

    torch.set_num_threads(1)  # a tiny model: more threads only contend (the arms run in their own processes)
    out.mkdir(parents=True, exist_ok=True)
    train, test = _problems()
    for name, records in (("train", train), ("test", test)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    bpe.decoder = decoders.ByteLevel()
    corpus = [f"<|user|>{r['messages'][0]['content']}\n<|assistant|> {r['answer']}" for r in train + test]
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIAL,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                 additional_special_tokens=SPECIAL[3:], chat_template=CHAT_TEMPLATE)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(hf), hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         bos_token_id=hf.bos_token_id, eos_token_id=hf.eos_token_id, pad_token_id=hf.pad_token_id,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    tokenizer = HFTokenizer(hf)
    demos = [PromptExample(tuple(r["messages"]), r["answer"], str(i), solution=" " + r["answer"])
             for i, r in enumerate(train)]
    warmup(model, tokenizer, demos, steps=warmup_steps, batch_size=WARMUP_BATCH, lr=WARMUP_LR,
           rng=np.random.default_rng(0))
    model.generation_config = GenerationConfig(bos_token_id=hf.bos_token_id, eos_token_id=hf.eos_token_id,
                                               pad_token_id=hf.pad_token_id)
    model.save_pretrained(model_dir)
    hf.save_pretrained(model_dir)
    stamp.write_text(json.dumps(built_with))
    return out


def flashsim_command(arm: str, run: dict, out: Path, assets: Path) -> list[str]:
    """``python -m scale train`` for a flashsim arm, as a user types it."""
    loss = "grpo" if arm == "grpo" else "flash_reinforce"
    group = GROUP_SIZE if arm == "grpo" else 1
    return [sys.executable, "-m", "scale", "train", "--model", str(assets / "model"),
            "--data.train", str(assets / "train.jsonl"), "--data.test", str(assets / "test.jsonl"),
            "--rollout.reward", "bench_vs_trl:last_integer_reward", "--warmup.steps", "0", "--algo", loss,
            "--rollout.group-size", str(group), "--train.updates", str(run["updates"]),
            "--train.batch-size", str(run["batch"]), "--train.learning-rate", str(run["lr"]),
            "--rollout.max-new-tokens", str(run["max_new_tokens"]), "--rollout.temperature", "1.0",
            "--eval.every", str(run["eval_every"]), "--eval.num-prompts", str(run.get("eval_prompts", EVAL_PROMPTS)),
            "--seed", str(run["seed"]), "--out", str(out), "--no-log.progress",
            "--log.checkpoint-every", "0", *run.get("flashsim_flags", [])]


def trl_command(arm: str, run: dict, out: Path, assets: Path) -> list[str]:
    threads = "1" if arm == "trl_1thread" else "default"
    return [sys.executable, __file__, "trl-child", "--assets", str(assets), "--out", str(out),
            "--threads", threads, "--run", json.dumps(run)]


def run_arm(arm: str, run: dict, out: Path, assets: Path) -> dict[str, Any]:
    """One arm in its own process; its rows, wall-clock and peak RSS."""
    command = (trl_command if arm.startswith("trl") else flashsim_command)(arm, run, out, assets)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                                        os.environ.get("PYTHONPATH", "")])}
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(out / "stdout.txt", "w") as stdout, open(out / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=env)
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        tail = (out / "stderr.txt").read_text()[-2000:]
        raise RuntimeError(f"arm {arm} failed (exit {process.returncode}): {' '.join(command)}\n{tail}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {"arm": arm, **{k: run[k] for k in ("seed", "lr")}, "wall_s": wall,
            "peak_rss_mb": usage.ru_maxrss / 1024, **summarize(rows, wall, run)}


def summarize(rows: list[dict], wall: float, run: dict) -> dict[str, Any]:
    """Per-update seconds by part, RL-only throughput and the first evaluation at the threshold."""
    rl = [r for r in rows if r["update"] >= 1 and "time/learn_s" in r]
    n = len(rl)

    def total(key: str, among: list[dict] = rows) -> float:
        return sum(r.get(key) or 0.0 for r in among)

    def end(row: dict) -> float:  # RL wall-clock at the end of the row's evaluation and plotting
        return row["time/elapsed_s"] + (row.get("time/eval_s") or 0.0) + (row.get("time/plot_s") or 0.0)

    rl_wall = end(rl[-1]) - total("time/eval_s", rl) - total("time/plot_s", rl)
    tokens = sum(r["rollout/length"] * r["rollout/trajectories"] for r in rl)
    reached = next((r for r in rows if (r.get(THRESHOLD_KEY) or 0.0) >= run["threshold"]), None)
    if reached is None:
        to_threshold = {"rollouts_to_threshold": math.nan, "seconds_to_threshold": math.nan}
    else:
        # The training after that evaluation; the final curves.png stays counted (a run stopped there draws it).
        last = end(rl[-1]) - (rl[-1].get("time/plot_s") or 0.0)
        after = max(0.0, last - (end(reached) if reached["update"] >= 1 else 0.0))
        to_threshold = {"rollouts_to_threshold": reached["update"] * run["batch"],
                        "seconds_to_threshold": wall - after}
    final = rows[-1]
    return {"updates": n, "generate_s": total("time/generate_s", rl) / n, "learn_s": total("time/learn_s", rl) / n,
            "eval_s": total("time/eval_s") / n, "plot_s": total("time/plot_s") / n, "rl_s_per_update": rl_wall / n,
            "outside_rl_s": wall - end(rl[-1]),
            "rollouts_per_s": sum(r["rollout/trajectories"] for r in rl) / rl_wall, "tokens_per_s": tokens / rl_wall,
            "start_accuracy": rows[0].get(THRESHOLD_KEY, math.nan),
            "final_accuracy": final.get(THRESHOLD_KEY, math.nan),
            "final_accuracy_greedy": final.get("eval/accuracy_greedy", math.nan), **to_threshold}


# ---------------------------------------------------------------------------------------------- the TRL arm


def trl_child(assets: Path, out: Path, threads: str, run: dict) -> None:
    """Train with TRL's GRPOTrainer in this process; write ``metrics.jsonl`` rows in flashsim's keys."""
    import torch

    if threads != "default":
        torch.set_num_threads(int(threads))
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(assets / "model")
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(assets / "model", dtype=torch.float32)

    def load(name: str) -> list[dict]:
        return [json.loads(line) for line in (assets / f"{name}.jsonl").read_text().splitlines()]

    train = Dataset.from_list([{"prompt": r["messages"], "answer": r["answer"]} for r in load("train")])
    test = load("test")[: run.get("eval_prompts", EVAL_PROMPTS)]

    def reward(prompts: list, completions: list, answer: list, **_: Any) -> list[float]:
        return [last_integer_reward(p, c[0]["content"], a) for p, c, a in zip(prompts, completions, answer)]

    timing = {"generate": 0.0, "step": 0.0}
    rows: list[dict] = []

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            start = time.perf_counter()
            result = super()._generate_and_score_completions(inputs)
            timing["generate"] += time.perf_counter() - start
            return result

        def training_step(self, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            result = super().training_step(*args, **kwargs)
            timing["step"] += time.perf_counter() - start
            return result

    generator = torch.Generator().manual_seed(run["seed"] + 10_000)

    def evaluate() -> dict[str, float]:
        prompts = [tokenizer.apply_chat_template(r["messages"], tokenize=False, add_generation_prompt=True)
                   for r in test]
        batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        result, training = {}, model.training
        model.eval()  # as TRL generates: no gradient checkpointing, the KV cache on
        for key, sample in (("eval/accuracy", True), ("eval/accuracy_greedy", False)):
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator)))
            with torch.no_grad():
                ids = model.generate(**batch, max_new_tokens=run["max_new_tokens"], do_sample=sample,
                                     temperature=1.0 if sample else None, top_p=None, top_k=None,
                                     pad_token_id=tokenizer.pad_token_id)
            texts = tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
            result[key] = sum(last_integer_reward(None, t, r["answer"]) for t, r in zip(texts, test)) / len(test)
        model.train(training)
        return result

    state = {"started": 0.0, "last": {"generate": 0.0, "step": 0.0}}

    class Measure(TrainerCallback):
        def on_train_begin(self, args: Any, trainer_state: Any, control: Any, **kwargs: Any) -> None:
            start = time.perf_counter()
            rows.append({"update": 0, **evaluate(), "time/eval_s": time.perf_counter() - start})
            state["started"] = time.perf_counter()

        def on_log(self, args: Any, trainer_state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            # Logged after on_step_end: the length belongs to the row of this step.
            if logs and "completions/mean_length" in logs and rows and rows[-1]["update"] == trainer_state.global_step:
                rows[-1]["rollout/length"] = float(logs["completions/mean_length"])

        def on_step_end(self, args: Any, trainer_state: Any, control: Any, **kwargs: Any) -> None:
            k, last = trainer_state.global_step, state["last"]
            generate, step = timing["generate"] - last["generate"], timing["step"] - last["step"]
            state["last"] = dict(timing)
            row = {"update": k, "time/generate_s": generate, "time/learn_s": step - generate,
                   "time/elapsed_s": time.perf_counter() - state["started"], "rollout/trajectories": run["batch"],
                   "rollout/length": math.nan}
            if k % run["eval_every"] == 0 or k == run["updates"]:
                start = time.perf_counter()
                row.update(evaluate())
                row["time/eval_s"] = time.perf_counter() - start
            rows.append(row)

    config = GRPOConfig(output_dir=str(out / "trl"), per_device_train_batch_size=run["batch"],
                        gradient_accumulation_steps=1, num_generations=GROUP_SIZE,
                        max_completion_length=run["max_new_tokens"], temperature=1.0, learning_rate=run["lr"],
                        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
                        max_steps=run["updates"], logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                        seed=run["seed"], disable_tqdm=True, dataloader_num_workers=0, beta=0.0,
                        gradient_checkpointing=False)
    trainer = TimedGRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=train,
                               processing_class=tokenizer, callbacks=[Measure()])
    trainer.train()
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


# ------------------------------------------------------------------------------------------------ the table


def _ratio_cells(results: list[dict], arm: str, key: str, reference: dict[tuple, dict]) -> str:
    ratios = [r[key] / reference[(r["seed"], r["lr"])][key] for r in results
              if r["arm"] == arm and (r["seed"], r["lr"]) in reference and reference[(r["seed"], r["lr"])][key]]
    ratios = [x for x in ratios if math.isfinite(x)]
    if not ratios:
        return "–"
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"


def _median(results: list[dict], arm: str, key: str, fmt: str) -> str:
    values = [r[key] for r in results if r["arm"] == arm and math.isfinite(r[key])]
    missing = sum(1 for r in results if r["arm"] == arm) - len(values)
    if not values:
        return "not reached" if key.endswith("threshold") else "–"
    text = format(statistics.median(values), fmt)
    return text + (f" ({missing} not reached)" if missing else "")


def table(results: list[dict], settings: dict) -> str:
    """The Markdown report: medians per arm, then each flashsim arm's ratio to TRL's best thread setting."""
    arms = [a for a in ARMS if any(r["arm"] == a for r in results)]
    columns = [("generate_s", "generation s/update", ".3f"), ("learn_s", "learner s/update", ".3f"),
               ("eval_s", "evaluation s/update", ".3f"), ("plot_s", "plotting s/update", ".3f"),
               ("rl_s_per_update", "RL-only s/update", ".3f"), ("rollouts_per_s", "rollouts/s", ".0f"),
               ("tokens_per_s", "tokens/s", ".0f"), ("peak_rss_mb", "peak RSS MB", ".0f"),
               ("outside_rl_s", "outside the RL loop s", ".1f"), ("wall_s", "whole process s", ".1f"),
               ("rollouts_to_threshold", "rollouts to threshold", ".0f"),
               ("seconds_to_threshold", "s to threshold", ".1f"), ("start_accuracy", "held-out acc before RL", ".3f"),
               ("final_accuracy", "held-out acc after", ".3f"), ("final_accuracy_greedy", "greedy acc after", ".3f")]
    lines = ["| arm | " + " | ".join(c[1] for c in columns) + " |", "|---|" + "---:|" * len(columns)]
    for arm in arms:
        lines.append(f"| {LABELS[arm]} | " + " | ".join(_median(results, arm, k, f) for k, _, f in columns) + " |")
    trl = [a for a in ("trl_1thread", "trl") if a in arms]
    text = ["Medians over seeds × learning rates.", "", *lines]
    if trl:
        best = min(trl, key=lambda a: statistics.median(r["seconds_to_threshold"] if math.isfinite(
            r["seconds_to_threshold"]) else r["wall_s"] * 10 for r in results if r["arm"] == a))
        reference = {(r["seed"], r["lr"]): r for r in results if r["arm"] == best}
        ratio_columns = [c for c in columns if "accuracy" not in c[0]]
        ratio_lines = ["| arm | " + " | ".join(c[1] for c in ratio_columns) + " |",
                       "|---|" + "---:|" * len(ratio_columns)]
        for arm in [a for a in arms if not a.startswith("trl")]:
            ratio_lines.append(f"| {LABELS[arm]} | " + " | ".join(_ratio_cells(results, arm, k, reference)
                                                                  for k, _, _ in ratio_columns) + " |")
        text += ["", f"Ratio flashsim / {LABELS[best]} (TRL's best setting here: the lower median seconds to the "
                 "threshold, or of the whole process when it was not reached), "
                 "paired by seed and learning rate: median (range).", "", *ratio_lines]
    text += ["", f"Settings: {json.dumps(settings)}.", "", "Differences between the arms that remain:", ""]
    text += [f"- {d}" for d in DIFFERENCES]
    return "\n".join(text) + "\n"


START, END = "<!-- bench_vs_trl:start -->", "<!-- bench_vs_trl:end -->"


def write_report(page: Path, body: str) -> None:
    """Put ``body`` between the benchmark's markers in ``page`` (appending a section the first time)."""
    text = page.read_text() if page.exists() else ""
    block = f"{START}\n{body}{END}"
    if START in text and END in text:
        text = text[: text.index(START)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Side by side with TRL's GRPOTrainer\n\n" + block + "\n"
    page.write_text(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["trl-child"]:
        child = argparse.ArgumentParser()
        child.add_argument("--assets", type=Path)
        child.add_argument("--out", type=Path)
        child.add_argument("--threads")
        child.add_argument("--run")
        a = child.parse_args(argv[1:])
        trl_child(a.assets, a.out, a.threads, json.loads(a.run))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_vs_trl"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--learning-rates", type=float, nargs="+", default=list(LEARNING_RATES))
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=THRESHOLD,
                        help="held-out accuracy (one sample at temperature 1 per prompt)")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--flashsim-flags", nargs=argparse.REMAINDER, default=[],
                        help="extra flags for every flashsim arm (last on the line)")
    parser.add_argument("--quick", action="store_true",
                        help="2 updates of 16 rollouts, 16 evaluation prompts, 1 seed, 1 learning rate (CI)")
    parser.add_argument("--report", type=Path, default=Path(__file__).parents[1] / "docs" / "performance.md")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--table-only", action="store_true", help="write the table from OUT/results.json")
    args = parser.parse_args(argv)
    args.eval_prompts = EVAL_PROMPTS
    if args.quick:  # a check that every arm runs, not a measurement
        args.seeds, args.learning_rates, args.updates, args.eval_every = 1, args.learning_rates[:1], 2, 2
        args.batch, args.eval_prompts = 16, 16
    results_file = args.out / "results.json"
    settings = {k: getattr(args, k) for k in ("seeds", "learning_rates", "updates", "batch", "eval_every",
                                              "threshold", "flashsim_flags")}
    if args.table_only:  # from the saved runs; the threshold may be another than the one they ran with
        saved = json.loads(results_file.read_text())
        settings, results = {**saved["settings"], "threshold": args.threshold}, saved["runs"]
        for result in results:
            folder = args.out / f"{result['arm']}-seed{result['seed']}-lr{result['lr']:g}"
            rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
            result.update(summarize(rows, result["wall_s"], {**settings, "threshold": args.threshold}))
    else:
        assets = build_assets(args.out / "assets", warmup_steps=5 if args.quick else WARMUP_STEPS)
        results = []
        plan = [(seed, lr) for seed in range(args.seeds) for lr in args.learning_rates]
        for repetition, (seed, lr) in enumerate(plan):
            arms = args.arms[repetition % len(args.arms):] + args.arms[: repetition % len(args.arms)]
            for arm in arms:
                run = {"seed": seed, "lr": lr, "updates": args.updates, "batch": args.batch, "max_new_tokens": 16,
                       "eval_every": args.eval_every, "eval_prompts": args.eval_prompts, "threshold": args.threshold,
                       "flashsim_flags": args.flashsim_flags}
                results.append(run_arm(arm, run, args.out / f"{arm}-seed{seed}-lr{lr:g}", assets))
                print(json.dumps(results[-1]), flush=True)
                # A stopped benchmark keeps what it ran (--table-only tabulates it).
                results_file.write_text(json.dumps({"settings": settings, "runs": results}, indent=1))
    body = table(results, settings)
    print(body)
    if not args.no_report:
        write_report(args.report, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
