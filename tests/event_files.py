"""Read TensorBoard event files back, as a raw reader and as TensorBoard itself sees them."""

from __future__ import annotations

from pathlib import Path


def raw_scalars(directory: Path) -> list[tuple[str, int, float]]:
    """Every scalar ``(tag, step, value)`` in the event files of ``directory``, in file order (nothing purged)."""
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    return [(value.tag, event.step, value.simple_value)
            for path in sorted(directory.glob("events.out.tfevents.*"))
            for event in LegacyEventFileLoader(str(path)).Load()
            for value in event.summary.value]


def tensorboard_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Tag → ``(step, value)`` as TensorBoard shows them (its ``EventAccumulator``, keeping every point)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0}).Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}
