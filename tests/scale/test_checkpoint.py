"""scale's checkpoints are flashsim's: tensors and plain data in the run directory, written atomically,
refused when tampered with."""

import pytest
import torch

from flashsim.outputs import RunDirectory
from scale.run.trainer import CHECKPOINT, COLUMNS
from tests.test_io import _Evil


def test_a_training_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
             "version": 3, "summary": {"after_warmup": {"eval/accuracy": 0.25}}}
    with RunDirectory(tmp_path, COLUMNS, checkpoint=CHECKPOINT) as run:
        run.start()
        run.write({"update": 0, "eval/accuracy": 0.25})
        run.save(state)
    loaded = {}
    with RunDirectory(tmp_path, COLUMNS, checkpoint=CHECKPOINT) as run:
        run.resume(loaded.update)
    assert (tmp_path / CHECKPOINT).is_file()
    assert all(torch.equal(loaded["model"][k], v) for k, v in state["model"].items())
    restored = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=1.0)
    restored.load_state_dict(loaded["optimizer"])
    assert restored.param_groups[0]["lr"] == 1e-3
    assert loaded["version"] == 3 and loaded["summary"] == state["summary"]


def test_a_tampered_checkpoint_is_refused_and_runs_nothing(tmp_path):
    (tmp_path / CHECKPOINT).parent.mkdir(parents=True)
    torch.save({"model": _Evil(tmp_path / "pwned")}, tmp_path / CHECKPOINT)
    with pytest.raises(ValueError, match="refusing to load"):
        RunDirectory(tmp_path, COLUMNS, checkpoint=CHECKPOINT).resume(lambda state: None)
    assert not (tmp_path / "pwned").exists()
