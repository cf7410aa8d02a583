"""``flashsim demo``: one FlashREINFORCE update on a random stale batch, with its trust-region stats.

A placeholder-sized demo of the loss core until the simulator's comparison replaces it: a tiny
tabular policy, a batch of B trajectories sampled by a slightly older snapshot, and one step.
"""

from __future__ import annotations

import argparse

import torch

from flashsim.losses import flash_reinforce_loss


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run one FlashREINFORCE update on a random stale batch")
    parser.add_argument("--batch", type=int, default=64, help="trajectories in the batch (B)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    generator = torch.Generator().manual_seed(args.seed)
    num_states, num_actions, width = 8, 4, 16
    logits = torch.randn(num_states, num_actions, generator=generator, dtype=torch.float64)
    stale = logits + 0.05 * torch.randn(num_states, num_actions, generator=generator, dtype=torch.float64)
    logits.requires_grad_(True)
    states = torch.randint(num_states, (args.batch, width), generator=generator)
    lengths = torch.randint(1, width + 1, (args.batch,), generator=generator)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    actions = torch.multinomial(torch.softmax(stale[states.flatten()], -1), 1, generator=generator).view_as(states)
    behavior = torch.log_softmax(stale, -1)[states, actions]
    rewards = (actions == 0).double().mean(dim=1).round()
    log_probs = torch.log_softmax(logits, -1)[states, actions]
    loss, stats = flash_reinforce_loss(log_probs, behavior, rewards, mask)
    loss.backward()
    print(f"FlashREINFORCE, one update on B={args.batch} stale trajectories (seed {args.seed})")
    print(f"  loss                 {loss.item(): .5f}")
    print(f"  |grad|               {logits.grad.norm().item(): .5f}")
    for key in ("acceptance_rate", "token_acceptance_rate", "ess_fraction", "ratio_min", "ratio_max"):
        print(f"  {key:<20} {stats[key].item(): .5f}")
    print(f"  mean sequence KL     {stats['sequence_kl'].mean().item(): .5f}  (gate δ = 3e-3)")
    return 0
