"""Rollout engine on vLLM (GPU): the same :class:`RolloutEngine` interface, thin on purpose.

What it relies on from vLLM (≥ 0.10.2):
- token-id prompts (``TokensPrompt``) and ``SamplingParams(logprobs=0)``, which returns the sampled
  token's log-prob;
- ``LLM(logprobs_mode="processed_logprobs")``, so that log-prob is of the distribution actually
  sampled from (after temperature), not of the raw logits — without it the importance ratios of any
  temperature ≠ 1 would be wrong, so the engine refuses to start;
- in-place weight updates through ``LLM.apply_model`` (``model.load_weights``), then a prefix-cache
  reset so no KV entry computed with the old weights is reused. Run with
  ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` so that the engine core lives in this process and the update
  does not have to pickle the weights to another one.

The learner's recomputed log-probs will differ slightly from vLLM's (other kernels, bf16); that
train–inference mismatch is exactly what FlashREINFORCE's ratios and sequence gate account for.

Not run in this repository's CI (no GPU); see ``tests/scale/test_vllm_engine.py`` (``@pytest.mark.gpu``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scale.engine.base import SamplingParams, Trajectory


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as error:
        raise ImportError("VLLMEngine needs vLLM: pip install 'flashsim[vllm]' (GPU only)") from error
    return vllm


class VLLMEngine:
    """Samples with a vLLM ``LLM`` built from ``model`` (a local path or hub id).

    Args:
        model: what ``vllm.LLM(model=...)`` loads; the learner must start from the same weights.
        seed: vLLM's sampling seed.
        llm_options: extra keyword arguments of ``vllm.LLM`` (``dtype``, ``gpu_memory_utilization``,
            ``tensor_parallel_size``, ``skip_tokenizer_init`` ...).
    """

    def __init__(self, model: str, *, seed: int = 0, **llm_options: Any) -> None:
        self._vllm = _import_vllm()
        try:
            self.llm = self._vllm.LLM(model=model, seed=seed, logprobs_mode="processed_logprobs", **llm_options)
        except TypeError as error:
            raise RuntimeError(
                "this vLLM has no logprobs_mode='processed_logprobs' (needs ≥ 0.10.2): its log-probs would be "
                "of the raw logits, not of the sampling distribution"
            ) from error
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def update_weights(self, weights: Any, version: int) -> None:
        """Load ``weights`` (a module or a state dict, Hugging Face names) into the running engine."""
        state = weights.state_dict() if hasattr(weights, "state_dict") else weights
        items = [(name, tensor.detach()) for name, tensor in state.items()]
        self.llm.apply_model(lambda model: model.load_weights(items))
        self.llm.reset_prefix_cache()
        self._version = int(version)

    def _params(self, sampling: SamplingParams) -> Any:
        return self._vllm.SamplingParams(
            n=1, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or -1,
            max_tokens=sampling.max_new_tokens, stop=list(sampling.stop) or None,
            include_stop_str_in_output=True, logprobs=0,
        )

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Trajectory]:
        """One trajectory per token-id prompt; ``log_probs`` are vLLM's processed sampled-token log-probs."""
        version = self._version
        requests = [self._vllm.inputs.TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(requests, self._params(sampling), use_tqdm=False)
        trajectories = []
        for prompt, output in zip(prompts, outputs):
            completion = output.outputs[0]
            tokens = list(completion.token_ids)
            log_probs = [float(step[token].logprob) for step, token in zip(completion.logprobs, tokens)]
            if completion.finish_reason == "length":
                reason = "length"
            else:
                reason = "stop" if completion.stop_reason is not None else "eos"
            trajectories.append(Trajectory(list(prompt), tokens, [True] * len(tokens), log_probs, reason, version))
        return trajectories
