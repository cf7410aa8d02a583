"""The CLI and the run: a 3-update smoke run in a subprocess, resume equivalence, bad configurations."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("yaml")

import torch  # noqa: E402

from scale.cli import main  # noqa: E402
from scale.run.config import load_config  # noqa: E402
from scale.run.trainer import Trainer  # noqa: E402
from tests.event_files import raw_scalars  # noqa: E402
from tests.scale.tiny_run import TINY  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "scale", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_a_three_update_async_run_through_the_cli_writes_metrics_checkpoint_and_summary(tmp_path, capsys):
    out = tmp_path / "run"
    sets = [x for s in TINY + ["train.updates=3", "loop.threads=1"] for x in ("--set", s)]
    result = _cli("train", "--config", "scale/configs/tiny_cpu.yaml", "--out", str(out), "--logger", "tensorboard",
                  *sets)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["updates"] == 3 and "eval/accuracy" in summary["final"] and "accuracy_gain" in summary
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1, 2, 3]
    for row in rows[1:]:
        assert row["rollout/trajectories"] >= 8 and row["lag/mean"] >= 0 and 0 <= row["trust/acceptance_rate"] <= 1
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"update", "rollout/reward", "lag/mean", "eval/accuracy", "trust/sequence_kl_mean"} <= set(header)
    assert (out / "checkpoint" / "state.pt").exists() and (out / "config.yaml").exists()
    assert (out / "curves.png").stat().st_size > 0

    # --resume continues the same run (in-process: the subprocess start-up is the slow part of this test).
    assert main(["train", "--config", "tiny_cpu", "--out", str(out), "--resume", "--logger", "tensorboard",
                 *[x for s in TINY + ["train.updates=4"] for x in ("--set", s)]]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1, 2, 3, 4]
    scalars = raw_scalars(out)  # TensorBoard's copy of the rows, each step once
    assert sorted(step for tag, step, _ in scalars if tag == "rollout/reward") == [1, 2, 3, 4]
    assert sorted(step for tag, step, _ in scalars if tag == "eval/accuracy") == [0, 2, 3, 4]
    capsys.readouterr()
    assert main(["curve", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == f"| update | {out} |"
    assert [line.split("|")[1].strip() for line in table[2:]] == ["0", "2", "3", "4"]


@pytest.mark.parametrize("args, message", [
    (["--set", "train.batch_size=0"], "train.batch_size must be an int >= 1, got 0"),
    (["--train.batch-size", "0"], "train.batch_size must be an int >= 1, got 0"),
    (["--set", "train.bogus=1"], "unknown key train.bogus"),
    (["--algo", "nope"], "train.loss must be one of"),
    (["--set", "rollout.top_p=0.5"], "biases the importance ratio"),
    (["--set", "train.learning_rate=fast"], "train.learning_rate must be a real number, got 'fast'"),
    (["--set", "train.lr=0.1"], "train.lr is now called train.learning_rate"),
    (["--set", "train.algo=grpo"], "train.algo is now called train.loss"),
    (["--train.lr", "5"], "unrecognized arguments: --train.lr"),
    (["--set", "loop.threads=2.5"], "loop.threads must be an int, got '2.5'"),
    (["--algo", "grpo", "--set", "loop.queue_size=12"], "loop.queue_size must be a multiple of the group size 8"),
    (["--config", "missing.yaml"], "does not exist"),
    (["--logger", "wandb"], "log.logger must be one of 'tensorboard'; got 'wandb'"),
    (["--set", "log.tensorboard=true"], "log.tensorboard is now called log.logger"),
], ids=["zero-batch", "zero-batch-flag", "unknown-key", "unknown-algo", "truncated-sampler", "bad-type",
        "former-lr", "former-algo", "no-prefix-of-another-flag", "bad-int", "queue-vs-group", "missing-file",
        "unknown-logger", "former-tensorboard"])
def test_a_bad_configuration_exits_with_a_clear_error(args, message, capsys):
    if "--config" not in args:
        args = ["--config", "tiny_cpu", *args]
    try:
        assert main(["train", *args]) == 2
    except SystemExit as exit:  # argparse's own usage errors
        assert exit.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_the_module_entry_point_reports_a_bad_configuration_with_exit_status_2():
    result = _cli("train", "--config", "tiny_cpu", "--set", "loop.mode=sometimes")
    assert result.returncode == 2
    assert "loop.mode must be one of 'auto', 'async', 'sync'; got 'sometimes'" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["rollout.injected_lag=2", "train.learning_rate=3e-3",
                                        "rollout.reward=tests.scale.test_rewards:length_reward"]],
                         ids=["newest-weights", "injected-lag"])  # with a lag the kept weights are checkpointed
def test_resume_continues_exactly_as_the_uninterrupted_run(tmp_path, extra):
    def config(out, updates):
        return load_config(ROOT / "scale/configs/tiny_cpu.yaml",
                           TINY + [f"log.out={out}", f"train.updates={updates}", "loop.mode=sync", "eval.every=100",
                                   "log.curves=false", *extra])

    straight = Trainer(config(tmp_path / "a", 5))
    straight.run()
    Trainer(config(tmp_path / "b", 2)).run()
    resumed = Trainer(config(tmp_path / "b", 5), resume=True)
    resumed.run()
    for (name, a), (_, b) in zip(straight.parts.model.state_dict().items(), resumed.parts.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert resumed.digest() == straight.digest()  # weights, optimizer state and schedule all bitwise equal
    rows = [[json.loads(line) for line in (tmp_path / d / "metrics.jsonl").read_text().splitlines()] for d in "ab"]
    keys = ("update", "rollout/reward", "rollout/length", "loss/policy", "grad/norm", "lag/mean",
            "trust/sequence_kl_mean")
    assert [[r.get(k) for k in keys] for r in rows[0]] == [[r.get(k) for k in keys] for r in rows[1]]


@pytest.mark.slow
def test_a_checkpoint_whose_optimizer_state_does_not_belong_to_its_weights_is_refused(tmp_path):
    """The checkpoint records the digest of the state it holds (scale.learner.digest); a resume recomputes it."""
    from flashsim.storage import load_checkpoint, save_checkpoint

    def config(updates):
        return load_config(ROOT / "scale/configs/tiny_cpu.yaml",
                           TINY + [f"log.out={tmp_path}", f"train.updates={updates}", "loop.mode=sync",
                                   "eval.every=100", "log.curves=false", "log.checkpoint_every=1"])

    run = Trainer(config(2))
    run.run()
    path = tmp_path / "checkpoint" / "state.pt"
    state = load_checkpoint(path)
    assert state["digest"] == run.digest()
    moments = next(iter(state["optimizer"]["state"].values()))
    moments["exp_avg"] = moments["exp_avg"] + 1e-3  # one parameter's first moment from elsewhere
    save_checkpoint(path, state)
    with pytest.raises(ValueError, match="do not belong together"):
        Trainer(config(3), resume=True).run()


@pytest.mark.parametrize("rate", ["5", "0"])
def test_the_warmup_command_refuses_a_learning_rate_the_yaml_refuses(rate, tmp_path, capsys):
    """``--learning-rate`` is WarmupConfig's field (its check and help), so the command and ``warmup.learning_rate``
    in a YAML file refuse the same values with the same words, before any model or data is read."""
    with pytest.raises(ValueError) as from_yaml:
        load_config(None, [f"warmup.learning_rate={rate}"])
    status = main(["warmup", "--model", str(tmp_path / "none"), "--data", str(tmp_path / "none.jsonl"),
                   "--out", str(tmp_path / "out"), "--learning-rate", rate, "--no-progress"])
    assert status == 2
    message = capsys.readouterr().err.strip()
    assert message == "error: " + str(from_yaml.value).replace("warmup.learning_rate", "learning_rate")
    assert not (tmp_path / "out").exists()
