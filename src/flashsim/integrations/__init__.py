"""FlashREINFORCE inside the trainers people already run.

- :mod:`flashsim.integrations.trl` — :class:`FlashReinforceConfig` (a TRL ``GRPOConfig``) and
  :class:`FlashReinforceTrainer` (a ``GRPOTrainer``): one rollout per prompt, the batch-mean baseline, the
  sequence trust region, sample-mean aggregation;
- :mod:`flashsim.integrations.verl` — ``flash_reinforce`` registered in verl's policy-loss and
  advantage-estimator registries (``verl.trainer.ppo.core_algos``).

Each module imports its framework when it is imported (never when :mod:`flashsim` is), computes the loss with
:func:`flashsim.losses.flash_reinforce_loss` and the advantages with :func:`flashsim.losses.batch_centered`,
and is a row of the conformance page (``docs/conformance.md``). How to use them: ``docs/integrations.md``.
"""
