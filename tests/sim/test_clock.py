"""The simulated clock's idle fractions."""

from flashsim.sim.rollouts import SimClock


def test_workers_that_never_idle_report_zero_idle_not_a_rounding_negative():
    busy = 0.2 + 0.7 + 0.013  # three workers, each busy for the whole run
    now = busy / 3
    assert 1.0 - busy / (3 * now) < 0  # the raw formula rounds below zero here
    assert SimClock(now=now, worker_busy=busy).metrics(num_workers=3)["time/worker_idle"] == 0.0


def test_worker_idle_is_the_unused_fraction_of_worker_time():
    assert SimClock(now=2.0, worker_busy=1.0).metrics(num_workers=2)["time/worker_idle"] == 0.75
