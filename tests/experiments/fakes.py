"""A constructed cell function for runner and analysis tests: fast, deterministic, with known effects.

``fake_run(config)`` returns every metric of ``CELL_METRICS``; ``success_train`` is 0.5 + a seed
effect shared by all arms + 0.2 for loss ``flash_reinforce`` at learning rate 0.1 only (so a design
whose knob is the learning rate has a verdict that changes along it), + a small arm-and-seed wobble. The
exact optimum is 1.0, so no arm is at the ceiling.
"""

from flashsim.experiments.run_cell import CELL_METRICS

WOBBLE = (0.01, -0.02, 0.015, -0.005, 0.02, -0.01)


def fake_run(config):
    algorithm, seed = config.algorithm, config.seed
    effect = 0.2 if algorithm.loss == "flash_reinforce" and algorithm.learning_rate == 0.1 else 0.0
    wobble = WOBBLE[(seed + len(algorithm.loss)) % len(WOBBLE)]
    success = 0.5 + 0.03 * seed + effect + wobble
    metrics = dict.fromkeys(CELL_METRICS, 0.0)
    metrics.update(success_train=success, success_peak=success, length=float(config.updates), optimum=1.0,
                   optimum_heldout=1.0, auc=success - 0.1)
    curve = {"update": [0.0, float(config.updates - 1)], "sim_clock": [0.0, 1.0], "success_train": [0.5, success],
             "tool_calls": [1.0, success]}
    return {"metrics": metrics, "curve": curve}


def failing_after(limit):
    """A cell function that runs ``limit`` cells, then raises (an interrupted sweep)."""
    calls = []

    def run(config):
        if len(calls) >= limit:
            raise KeyboardInterrupt("interrupted")
        calls.append((config.algorithm.loss, config.algorithm.learning_rate, config.seed))
        return fake_run(config)

    run.calls = calls
    return run
