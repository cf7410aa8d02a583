"""``python -m scale train``: train a policy with a flashsim loss, asynchronously, from a YAML preset.

Examples::

    python -m scale train --config scale/configs/tiny_cpu.yaml
    python -m scale train --config scale/configs/tiny_cpu.yaml --algo grpo --out runs/grpo
    python -m scale train --config scale/configs/tiny_cpu.yaml --set loop.mode=sync --set train.updates=10
    python -m scale train --config scale/configs/tiny_cpu.yaml --resume
    python -m scale train --config my.yaml --model Qwen/Qwen2.5-0.5B-Instruct   # a real model, on a GPU box
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scale", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="warm up (tiny model) and train with RL")
    train.add_argument("--config", default=None,
                       help="YAML preset (a path, or a bundled name such as tiny_cpu); default: built-in defaults")
    train.add_argument("--model", default=None, help="pretrained model path or hub id (sets model.name)")
    train.add_argument("--algo", default=None, help="loss name from flashsim.losses.LOSSES (sets train.algo)")
    train.add_argument("--out", default=None, help="output directory (sets log.out)")
    train.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    train.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                       help="override any config key (repeatable), e.g. --set train.updates=10")
    return parser


def resolve_config_path(name: str | None) -> Path | None:
    """A config path as given, or a bundled preset by name (``tiny_cpu`` → scale/configs/tiny_cpu.yaml)."""
    if name is None:
        return None
    path = Path(name)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    bundled = resources.files("scale") / "configs" / f"{name}.yaml"
    return Path(str(bundled)) if bundled.is_file() else path


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from scale.config import load_config

    overrides = list(args.set)
    for key, value in (("model.name", args.model), ("train.algo", args.algo), ("log.out", args.out)):
        if value is not None:
            overrides.append(f"{key}={json.dumps(value)}")
    try:
        config = load_config(resolve_config_path(args.config), overrides)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from scale.trainer import Trainer  # imports transformers: only once the configuration is known to be good

    summary = Trainer(config, resume=args.resume).run()
    print(json.dumps(summary, indent=2))
    return 0
