"""The --set overrides that shrink the tiny_cpu preset to a run of seconds, shared by the scale run tests."""

TINY = [
    "warmup.steps=5", "train.batch_size=8", "model.hidden_size=32", "model.intermediate_size=64",
    "data.num_train=64", "data.num_test=16", "eval.every=2", "loop.trajectories_per_call=4", "loop.queue_size=4",
    "log.progress=false", "rollout.max_new_tokens=12", "log.checkpoint_every=2",
]
