"""Rollout engine on a ``transformers`` causal LM: batched sampling with a KV cache, any device.

The sampling loop is written out (no ``model.generate``) so that the recorded log-probability of each
token is exactly that of the distribution the token was drawn from: ``log_softmax(logits / τ)`` (after
top-k / min-p / top-p masking and renormalisation when those are explicitly allowed). Prompts are left-padded
with explicit position ids, the same layout the learner uses, so on-policy the learner's recomputed
log-probs equal these up to floating-point summation order (ratio 1).

Weight publication is non-blocking: :meth:`TransformersEngine.update_weights` stores a detached copy;
the next :meth:`generate` call loads it before sampling, so one call never mixes two versions.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Sequence
from typing import Any

import torch

from flashsim.validation import check_int
from scale.rollouts.engines.weights import EngineBase
from scale.rollouts.tokenizer import Tokenizer
from scale.rollouts.trajectory import SamplingParams, Trajectory


def sample_tokens(
    logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row and return its log-probability under the sampling distribution.

    Shape:
        logits ``[B, V]``; returns tokens ``[B]`` long and log-probs ``[B]`` (float32 or wider).
    """
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    if sampling.greedy:
        return logits.argmax(-1), torch.zeros(logits.shape[0], dtype=logits.dtype, device=logits.device)
    logits = logits / sampling.temperature
    if sampling.top_k > 0:
        kth = torch.topk(logits, min(sampling.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.min_p > 0:  # p ≥ min_p · p_max  ⇔  logit ≥ max logit + log(min_p)
        floor = logits.max(-1, keepdim=True).values + math.log(sampling.min_p)
        logits = logits.masked_fill(logits < floor, float("-inf"))
    if sampling.top_p < 1:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        mass_before = torch.softmax(sorted_logits, -1).cumsum(-1) - torch.softmax(sorted_logits, -1)
        drop_sorted = mass_before >= sampling.top_p
        logits = logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    log_probs = torch.log_softmax(logits, dim=-1)
    tokens = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(-1)
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)


class TransformersEngine(EngineBase):
    """Samples trajectories from its own copy of a ``transformers`` causal LM.

    Args:
        model: the policy; the engine deep-copies it (the learner keeps training the original).
        tokenizer: used for ``eos_id``, ``pad_id`` and stop-string detection.
        seed: seeds the engine's sampling generator.
        max_batch_size: prompts per forward batch (``None``: all at once).
        device: where the engine's copy runs.
    """

    def __init__(
        self, model: Any, tokenizer: Tokenizer, *, seed: int = 0, max_batch_size: int | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        if max_batch_size is not None:
            check_int("max_batch_size", max_batch_size, low=1)
        self.model = copy.deepcopy(model).to(device).eval()
        self.model.requires_grad_(False)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self._cache_keyword = _cache_keyword(self.model)
        super().__init__(self.device)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Trajectory]:
        """One trajectory per prompt, sampled from the newest published weights."""
        if not all(len(p) > 0 for p in prompts):
            raise ValueError("every prompt must hold at least one token")
        version = self._weights.load_newest(self.model.load_state_dict)
        size = self.max_batch_size or max(len(prompts), 1)
        out: list[Trajectory] = []
        for start in range(0, len(prompts), size):
            out.extend(self._generate_batch(prompts[start : start + size], sampling, version))
        return out

    def _forward(self, input_ids, attention_mask, position_ids, cache):
        kwargs = {self._cache_keyword: cache} if cache is not None else {}
        output = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=True, **kwargs)
        return output.logits[:, -1], _output_cache(output)

    def _stopped(self, tokens: list[int], stop: tuple[str, ...]) -> bool:
        if not stop:
            return False
        tail = self.tokenizer.decode(tokens[-max(len(s) for s in stop) :])
        return any(s in tail for s in stop)

    @torch.no_grad()
    def _generate_batch(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, version: int):
        B, P = len(prompts), max(len(p) for p in prompts)
        input_ids = torch.full((B, P), self.tokenizer.pad_id, dtype=torch.long, device=self.device)
        attention_mask = torch.zeros((B, P), dtype=torch.long, device=self.device)
        for i, prompt in enumerate(prompts):
            input_ids[i, P - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            attention_mask[i, P - len(prompt) :] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        logits, cache = self._forward(input_ids, attention_mask, position_ids, None)
        tokens: list[list[int]] = [[] for _ in range(B)]
        log_probs: list[list[float]] = [[] for _ in range(B)]
        reasons: list[str | None] = [None] * B
        next_position = position_ids[:, -1:] + 1
        for step in range(sampling.max_new_tokens):
            token, token_log_prob = sample_tokens(logits, sampling, self.generator)
            token_list, log_prob_list = token.tolist(), token_log_prob.tolist()  # one host copy per step
            for i in range(B):
                if reasons[i] is None:
                    tokens[i].append(token_list[i])
                    log_probs[i].append(log_prob_list[i])
                    if tokens[i][-1] == self.tokenizer.eos_id:
                        reasons[i] = "eos"
                    elif tokens[i][-1] in sampling.stop_token_ids or self._stopped(tokens[i], sampling.stop):
                        reasons[i] = "stop"
            if all(r is not None for r in reasons) or step == sampling.max_new_tokens - 1:
                break
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(B, 1)], dim=1)
            logits, cache = self._forward(token[:, None], attention_mask, next_position, cache)
            next_position = next_position + 1
        return [
            Trajectory(prompt_ids=list(prompts[i]), token_ids=tokens[i], action_mask=[True] * len(tokens[i]),
                       log_probs=log_probs[i], finish_reason=reasons[i] or "length", version=version)
            for i in range(B)
        ]


def _cache_keyword(model: Any) -> str:
    """Name of the KV-cache argument of ``model.forward`` (``cache`` in transformers ≥ 5.2x, else
    ``past_key_values``)."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _output_cache(output: Any) -> Any:
    """The KV cache in a model output, under either name."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values
