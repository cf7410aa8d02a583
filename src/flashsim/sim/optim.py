"""Adam and SGD for the simulator's small policies, without ``torch.optim``.

Why not ``torch.optim``: the first ``torch.optim.Optimizer`` built in a process imports
``torch._dynamo`` (about 3 s of CPU on a 2-core machine, doubling the start-up of ``flashsim train``
and ``flashsim demo``), and its per-step machinery costs about 1 ms — 10 % of the simulator's
budget per update. The update rules here are those of ``torch.optim.Adam`` (Kingma & Ba 2015, with
PyTorch's operation order, so results agree to rounding) and plain SGD; a test checks both against
``torch.optim`` step by step.

Gradients are passed in (``torch.autograd.grad``), so parameters never accumulate ``.grad``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor


class SGD:
    """``θ ← θ − lr · g``."""

    def __init__(self, parameters: Iterable[Tensor], lr: float) -> None:
        self.parameters = list(parameters)
        self.lr = float(lr)

    @torch.no_grad()
    def step(self, gradients: Sequence[Tensor]) -> None:
        """Apply one update with ``gradients`` (one per parameter, same shapes)."""
        for parameter, gradient in zip(self.parameters, gradients, strict=True):
            parameter.add_(gradient, alpha=-self.lr)

    def state_dict(self) -> dict:
        return {"lr": self.lr}

    def load_state_dict(self, state: dict) -> None:
        self.lr = state["lr"]


class Adam(SGD):
    """Adam with bias correction: ``θ ← θ − lr · m̂ / (√v̂ + ε)`` (``torch.optim.Adam`` defaults)."""

    def __init__(
        self, parameters: Iterable[Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
    ) -> None:
        super().__init__(parameters, lr)
        self.betas, self.eps = betas, eps
        self.steps = 0
        self.first = [torch.zeros_like(p) for p in self.parameters]
        self.second = [torch.zeros_like(p) for p in self.parameters]

    @torch.no_grad()
    def step(self, gradients: Sequence[Tensor]) -> None:
        """Apply one Adam update with ``gradients`` (one per parameter, same shapes)."""
        beta1, beta2 = self.betas
        self.steps += 1
        step_size = self.lr / (1 - beta1**self.steps)
        correction2_sqrt = math.sqrt(1 - beta2**self.steps)
        for parameter, gradient, first, second in zip(self.parameters, gradients, self.first, self.second, strict=True):
            first.lerp_(gradient, 1 - beta1)
            second.mul_(beta2).addcmul_(gradient, gradient, value=1 - beta2)
            denominator = (second.sqrt() / correction2_sqrt).add_(self.eps)
            parameter.addcdiv_(first, denominator, value=-step_size)

    def state_dict(self) -> dict:
        return {
            "lr": self.lr, "steps": self.steps,
            "first": [m.clone() for m in self.first], "second": [v.clone() for v in self.second],
        }

    def load_state_dict(self, state: dict) -> None:
        self.lr, self.steps = state["lr"], state["steps"]
        for target, source in zip(self.first + self.second, state["first"] + state["second"], strict=True):
            target.copy_(source)
