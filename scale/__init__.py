"""``scale``: asynchronous RL for language models with flashsim's losses (layer 7 of flashsim).

Uses flashsim's public modules only (``flashsim.losses``, ``config``, ``outputs``, ``storage``, ``validation``,
``experiments``); flashsim never imports ``scale``. Four wings, each importing only the ones before it:

- :mod:`scale.rollouts` — from prompts to scored trajectories: the trajectory types and the engine
  interface, prompts and tokenizers, the transformers and vLLM engines, the calculator tool, rewards,
  one collect call, and the sources that feed the learner (synchronous, worker threads, Ray actors);
- :mod:`scale.learner` — one optimizer step per fresh batch: packing, chunked log-probs, the loss,
  data-parallel learners, the models;
- :mod:`scale.run` — the config, building the parts, the warm-up and the trainer, in flashsim's run directory
  (:class:`flashsim.outputs.RunDirectory`: metrics, checkpoint, summary, resume);
- :mod:`scale.studies` — the transformer studies (the claims, the collapse tests, C1 tuned, the results pages).

:mod:`scale.cli` (``python -m scale``) sits above the four.

Left out on purpose: reference-policy KL, several optimizer steps per batch (they would break
FlashREINFORCE's one step per fresh batch), sharded optimizers (ZeRO/FSDP).

Start with ``python -m scale train --config scale/configs/tiny_cpu.yaml`` (see ``docs/scale.md``).
"""

from flashsim.moved import add

add({"scale.run.cli": "scale.cli"} | {f"scale.run.{name}": f"scale.studies.{name}" for name in (
    "c1_tuned", "cells", "claim_report", "claims", "collapse", "collapse_rules", "pages")})
