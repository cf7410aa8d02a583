"""An engine in a child process (:class:`EngineProcess`, how a ``torchrun`` rank hosts vLLM) samples exactly
like the same engine in this process, gets the published weights, never sees ``torchrun``'s variables, and a
child killed from outside makes the next call raise."""

import functools
import os
import signal

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from scale.learner.model import build_tiny_model  # noqa: E402
from scale.rollouts import SamplingParams  # noqa: E402
from scale.rollouts.engines import TransformersEngine  # noqa: E402
from scale.rollouts.engines.engine_process import LAUNCHER_ENVIRONMENT, EngineProcess  # noqa: E402
from scale.rollouts.tokenizer import CharTokenizer  # noqa: E402

LAUNCHER = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
            "TORCHELASTIC_RUN_ID": "test"}


def _engine_outside_torchrun(model, tokenizer, seed):
    """The child's factory: refuses to build while any launcher variable is visible."""
    seen = sorted(k for k in os.environ if k in LAUNCHER_ENVIRONMENT or k.startswith("TORCHELASTIC_"))
    if seen:
        raise ValueError(f"the engine process sees torchrun's variables {seen}")
    return TransformersEngine(model, tokenizer, seed=seed)


def test_an_engine_in_a_child_process_samples_like_the_same_engine_here_and_gets_published_weights(monkeypatch):
    for key, value in LAUNCHER.items():
        monkeypatch.setenv(key, value)
    tokenizer = CharTokenizer()
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, seed=0)
    here = TransformersEngine(model, tokenizer, seed=3)
    child = EngineProcess(functools.partial(_engine_outside_torchrun, model, tokenizer, 3))
    try:
        prompts = [tokenizer.encode_prompt(p) for p in ("12*7=", "3+4=", "5=")]
        sampling = SamplingParams(max_new_tokens=8, temperature=1.0)
        assert child.generate(prompts, sampling) == here.generate(prompts, sampling)

        noise = torch.Generator().manual_seed(1)
        updated = {k: v + 0.1 * torch.randn(v.shape, generator=noise) for k, v in model.state_dict().items()}
        for engine in (here, child):
            engine.update_weights(updated, 5)
        assert child.version == 5
        sampled = child.generate(prompts, sampling)
        assert {t.version for t in sampled} == {5}
        assert sampled == here.generate(prompts, sampling)

        os.kill(child.process.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="exited with code -9 during generate"):
            child.generate(prompts, sampling)
    finally:
        child.close()


def test_an_engine_that_fails_to_start_raises_with_the_child_s_traceback():
    tokenizer = CharTokenizer()
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, seed=0)
    with pytest.raises(RuntimeError, match="failed in start:(.|\n)*ValueError: max_batch_size"):
        EngineProcess(functools.partial(TransformersEngine, model, tokenizer, max_batch_size=0))
