"""A sharded checkpoint written before the optimizer's first step (the one after the warm-up) resumes.

The warm-up leaves gradients on the parameters, so ``get_state_dict`` did not initialise the optimizer's state
when saving; the resumed process's fresh optimizer (no gradients) was initialised when loading and DCP then
raised "Missing key in checkpoint state_dict: optimizer.state...step". Found by the chaos soak (issue 41): an
FSDP run killed before its first periodic checkpoint could not resume."""

import functools
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_a_checkpoint_saved_before_the_first_step_with_gradients_left_loads(tokenizer, tmp_path):
    from scale.learner.model import build_tiny_model
    from scale.learner.sharding import load_sharded, save_sharded

    def parts(seed):
        model = build_tiny_model(tokenizer, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                                 seed=seed).double()
        return model, functools.partial(torch.optim.AdamW, lr=1e-3)(model.parameters())

    model, optimizer = parts(0)
    for p in model.parameters():  # what the warm-up leaves behind
        p.grad = torch.ones_like(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP: "torch.distributed is ... uninitialized, assuming ... one process"
        save_sharded(str(tmp_path / "sharded-0"), model, optimizer)
        fresh, fresh_optimizer = parts(1)
        load_sharded(str(tmp_path / "sharded-0"), fresh, fresh_optimizer)
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert not fresh_optimizer.state  # as fresh as the saved one: its first step is step 1
