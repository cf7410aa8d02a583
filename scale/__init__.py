"""``scale``: asynchronous RL for language models with flashsim's losses (layer 7 of flashsim).

Uses flashsim's public modules only (``flashsim.losses``, ``config``, ``io``, ``validation``); flashsim
never imports ``scale``. Three wings, each importing only the ones before it:

- :mod:`scale.rollouts` — from prompts to scored trajectories: the trajectory types and the engine
  interface, prompts and tokenizers, the transformers and vLLM engines, the calculator tool, rewards,
  one collect call, and the sources that feed the learner (synchronous, worker threads, Ray actors);
- :mod:`scale.learner` — one optimizer step per fresh batch: packing, chunked log-probs, the loss,
  data-parallel learners, the models;
- :mod:`scale.run` — the config, ``python -m scale``, building the parts, the warm-up and the trainer,
  in flashsim's run directory (:class:`flashsim.io.RunDirectory`: metrics, checkpoint, summary, resume).

Left out on purpose: reference-policy KL, several optimizer steps per batch (they would break
FlashREINFORCE's one step per fresh batch), sharded optimizers (ZeRO/FSDP).

Start with ``python -m scale train --config scale/configs/tiny_cpu.yaml`` (see ``docs/scale.md``).
"""
