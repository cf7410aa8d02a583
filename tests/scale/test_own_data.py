"""Your own model and data, all the way (docs/scale.md, "Your own model and data"), and the one-line errors
for what a user mistypes there.

The set-up, all built here (nothing downloaded): a tiny untrained ``LlamaForCausalLM`` saved with
``save_pretrained`` beside a byte-level BPE tokenizer trained with ``tokenizers`` and given a chat template;
``demos.jsonl`` (chat prompts with the answers to learn), ``prompts.jsonl`` and ``test.jsonl`` (the same
task without demonstrations), and ``my_rewards.py`` in the working directory. The ``warmup`` command
(through ``main()`` in this process) fine-tunes the model on the demonstrations into a new directory;
``python -m scale train`` trains that one with GRPO and the reward file, with neither ``PYTHONPATH`` nor
``--warmup.steps 0``.

Every error case runs ``python -m scale`` in a subprocess, as a user does, and checks exit status 2, one
line on stderr that names what is wrong, and no output directory.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tests.scale.bpe_tokenizer import bpe_tokenizer  # noqa: E402

REWARD_FILE = '''
def score(prompt, response, answer):
    """1 when the response's last word is the answer, 0.25 when it is another number, else 0."""
    words = response.split()
    if not words:
        return 0.0
    return 1.0 if words[-1] == answer else 0.25 if words[-1].isdigit() else 0.0
'''


def _question(a: int, b: int) -> str:
    return f"What is {a} plus {b}?"


def _records(seed: int, count: int) -> list[dict]:
    pairs = np.random.default_rng(seed).integers(0, 31, size=(count, 2))
    return [{"prompt": [{"role": "user", "content": _question(int(a), int(b))}], "answer": str(int(a + b))}
            for a, b in pairs]


def _write_jsonl(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder as a user has it: ``my_model/``, ``demos.jsonl``, ``prompts.jsonl``, ``test.jsonl``,
    ``my_rewards.py``, and ``broken_tokenizer/`` (a model whose tokenizer.json is damaged)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("own_data")
    demos, prompts, test = _records(0, 64), _records(1, 32), _records(2, 16)
    hf = bpe_tokenizer([f"{r['prompt'][0]['content']} {r['answer']}" for r in demos + prompts] * 4, vocab_size=200)
    config = LlamaConfig(vocab_size=len(hf), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True, pad_token_id=hf.pad_token_id, eos_token_id=hf.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    for name in ("my_model", "broken_tokenizer"):
        model.save_pretrained(root / name)
        hf.save_pretrained(root / name)
    (root / "broken_tokenizer" / "tokenizer.json").write_text("{not json")
    _write_jsonl(root / "demos.jsonl", demos)
    _write_jsonl(root / "prompts.jsonl", prompts)
    _write_jsonl(root / "test.jsonl", test)
    (root / "my_rewards.py").write_text(REWARD_FILE)
    return root


def _scale(workdir, *arguments: str) -> subprocess.CompletedProcess:
    """``python -m scale ...`` in ``workdir``, as a user runs it there: no PYTHONPATH."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "scale", *arguments], cwd=workdir, env=environment,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_your_own_demonstrations_warm_up_your_model_which_then_trains_with_your_reward_file(workdir, monkeypatch):
    """The warm-up runs through ``main()`` in this process (``python -m scale warmup`` starts in a subprocess in the
    error cases below); the training run, which imports the reward file from the working directory, in a
    subprocess as a user runs it."""
    from scale.cli import main

    monkeypatch.chdir(workdir)
    assert main(["warmup", "--model", "my_model", "--data", "demos.jsonl", "--out", "my_model_sft", "--steps", "40",
                 "--batch-size", "16", "--learning-rate", "1e-2", "--no-progress"]) == 0
    report = json.loads((workdir / "my_model_sft" / "warmup.json").read_text())
    assert report["demonstrations"] == 64 and report["loss_last"] < 0.5 * report["loss_first"]
    saved = {p.name for p in (workdir / "my_model_sft").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= saved

    trained = _scale(workdir, "train", "--model", "my_model_sft", "--data.train", "prompts.jsonl",
                     "--data.test", "test.jsonl", "--reward", "my_rewards.py:score", "--algo", "grpo",
                     "--train.updates", "2", "--train.batch-size", "16", "--loop.mode", "sync",
                     "--rollout.max-new-tokens", "6", "--no-eval.greedy", "--no-log.progress", "--no-log.curves",
                     "--out", "run")
    assert trained.returncode == 0, trained.stderr[-3000:]
    [start] = [line for line in trained.stderr.splitlines() if line.startswith("scale train: ")]
    assert start.startswith("scale train: grpo, G = 8 trajectories per prompt (LOSSES['grpo'].group_size")
    assert "2 prompts x 8 = 16 trajectories per update" in start and "warm-up 0 steps" in start
    rows = [json.loads(line) for line in (workdir / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1, 2]
    assert all(r["rollout/trajectories"] == 16 for r in rows[1:])
    # The warm-up, through the chat template, taught the model to answer with a number and stop: the reward
    # file scores its held-out answers above 0, and few run into the token budget (an untrained model's do).
    assert rows[0]["eval/accuracy"] > 0.0 and rows[0]["eval/truncation"] < 0.5


@pytest.fixture
def lines_file(workdir, tmp_path):
    """Write a file of the given lines; return its path (and ``suffix``)."""
    def write(name: str, lines: list[str], suffix: str = ""):
        path = tmp_path / name
        path.write_text("".join(line + "\n" for line in lines))
        return str(path) + suffix
    return write


GOOD = json.dumps({"prompt": "What is 1 plus 2?", "answer": "3"})
BAD_INPUTS = {
    "missing_model": (["train", "--model", "/nonexistent/model"],
                      "model directory '/nonexistent/model' does not exist"),
    "model_without_config": (["train", "--model", "."], "holds no config.json"),
    "tokenizer_cannot_load": (["train", "--model", "broken_tokenizer"],
                              "model 'broken_tokenizer': its tokenizer cannot load (JSONDecodeError"),
    "missing_data": (["train", "--data.train", "nope.jsonl"], "prompt file 'nope.jsonl' does not exist"),
    "data_bad_json": (["train", "--data.train", ("bad.jsonl", [GOOD, GOOD, "{oops"])], "bad.jsonl:3: not valid JSON"),
    "data_no_answer": (["train", "--data.train", ("noanswer.jsonl", [GOOD, '{"prompt": "hi"}'])],
                       "noanswer.jsonl:2: expected one of ('answer', 'solution', 'ground_truth')"),
    "reward_module_missing": (["train", "--data.train", "prompts.jsonl", "--reward", "no_such_module:score"],
                              "reward 'no_such_module:score': cannot import 'no_such_module' (ModuleNotFoundError"),
    "reward_file_missing": (["train", "--data.train", "prompts.jsonl", "--reward", "nope.py:score"],
                            "reward file 'nope.py' does not exist"),
    "reward_function_missing": (["train", "--data.train", "prompts.jsonl", "--reward", "my_rewards.py:scor"],
                                "reward 'my_rewards.py:scor': 'my_rewards.py' has no function 'scor'"),
    "reward_raises": (["train", "--data.train", "prompts.jsonl", "--reward",
                       ("raises.py", ["def score(p, r, a):", "    return 1 / 0"], ":score")],
                      "failed on the first training prompt with the response '"),
    "warmup_steps_without_demonstrations": (["train", "--data.train", "prompts.jsonl", "--warmup.steps", "5"],
                                            "warmup.steps: 5 needs demonstrations"),
    "warmup_missing_model": (["warmup", "--model", "/nonexistent", "--data", "demos.jsonl"],
                             "model directory '/nonexistent' does not exist"),
    "warmup_bad_demonstrations": (["warmup", "--model", "my_model", "--data", ("demos_bad.jsonl", [GOOD, "[1, 2]"])],
                                  "demos_bad.jsonl:2: expected a JSON object with a prompt and an answer; got list"),
}


def _arguments(case, lines_file, out):
    arguments, message = BAD_INPUTS[case]
    arguments = [lines_file(*a) if isinstance(a, tuple) else a for a in arguments]
    return [*arguments, "--out", str(out), *(["--no-log.progress"] if arguments[0] == "train" else [])], message


def _check_refused(returncode, stderr, message, out):
    lines = stderr.splitlines()
    assert returncode == 2, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert message in lines[0]
    assert not out.exists()


SUBPROCESS_CASES = ("missing_model", "tokenizer_cannot_load", "reward_raises", "warmup_bad_demonstrations")
"""The cases run as ``python -m scale`` in a subprocess (each costs an interpreter start with torch, ~5 s);
the others run through the same ``main()`` in this process."""


@pytest.mark.slow
@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_a_mistyped_input_stops_python_m_scale_with_one_line_exit_status_2_and_nothing_written(
        workdir, lines_file, tmp_path, case):
    arguments, message = _arguments(case, lines_file, tmp_path / "out")
    result = _scale(workdir, *arguments)
    _check_refused(result.returncode, result.stderr, message, tmp_path / "out")


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(set(BAD_INPUTS) - set(SUBPROCESS_CASES)))
def test_a_mistyped_input_stops_main_with_one_line_exit_status_2_and_nothing_written(
        workdir, lines_file, tmp_path, case, capsys, monkeypatch):
    from scale.cli import main

    monkeypatch.chdir(workdir)
    arguments, message = _arguments(case, lines_file, tmp_path / "out")
    threads = torch.get_num_threads()
    try:
        returncode = main(arguments)
    finally:
        torch.set_num_threads(threads)  # a train command sets loop.threads before it reads the files
    _check_refused(returncode, capsys.readouterr().err, message, tmp_path / "out")


def test_a_reward_loads_from_a_file_path_or_an_importable_module_name(tmp_path, monkeypatch):
    from scale.rollouts.rewards import resolve_reward

    (tmp_path / "my_rewards.py").write_text(REWARD_FILE)
    from_file = resolve_reward(f"{tmp_path / 'my_rewards.py'}:score")
    assert (from_file("q", "so it is 7", "7"), from_file("q", "7 or 8", "7"), from_file("q", "", "7")) == (1, 0.25, 0)
    assert "scale_reward_my_rewards" not in sys.modules  # kept out, so that Ray actors get it by value
    monkeypatch.syspath_prepend(str(tmp_path))  # what python -m does for the working directory
    assert resolve_reward("my_rewards:score")("q", "7", "7") == 1.0


def test_grpo_without_a_group_size_states_the_registrys_in_the_start_line_and_an_explicit_one_as_set():
    from flashsim.losses import LOSSES
    from scale.cli import start_line
    from scale.run.config import load_config

    default = start_line(load_config(None, ["train.loss=grpo"]))
    G = LOSSES["grpo"].group_size
    assert f"grpo, G = {G} trajectories per prompt (LOSSES['grpo'].group_size; set --rollout.group-size" in default
    explicit = start_line(load_config(None, ["train.loss=grpo", "rollout.group_size=4"]))
    assert "G = 4 trajectories per prompt (rollout.group_size)" in explicit
    assert "16 prompts x 4 = 64 trajectories per update" in explicit


def test_the_warm_up_runs_on_the_bundled_task_and_not_on_a_prompt_file_unless_asked(tmp_path):
    from scale.run.config import BUILTIN_WARMUP_STEPS, load_config

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(GOOD + "\n")
    assert load_config(None).warmup_steps == BUILTIN_WARMUP_STEPS
    assert load_config(None, ["warmup.steps=7"]).warmup_steps == 7
    assert load_config(None, [f"data.train={prompts}"]).warmup_steps == 0
    assert load_config(None, [f"data.train={prompts}", "warmup.steps=0"]).warmup_steps == 0
    with pytest.raises(ValueError, match="warmup.steps: 3 needs demonstrations"):
        load_config(None, [f"data.train={prompts}", "warmup.steps=3"])
