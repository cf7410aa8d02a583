"""Registries of experiments: one :class:`Registered` row per claim or follow-up, name → builder of its
:class:`~flashsim.experiments.design.ClaimDesign`.

Every experiment of the project is a :class:`~flashsim.experiments.design.ClaimDesign` made by a builder, and
every builder is one :class:`Registered` row of a :class:`Registry`: the simulator's claims and follow-ups in
:data:`flashsim.studies.DESIGNS` (``builder(profile)``, run by ``flashsim reproduce``), the transformer's in
``scale.studies.claims.TRANSFORMER_DESIGNS`` (``builder(base_config)``, run by ``python -m scale reproduce``).
What the commands used to decide from a claim's name is a field: of the row whether it is a follow-up (run by
name only, never in ``all``, on a page of its own), of the design whether it is probed
(:attr:`~flashsim.experiments.design.ClaimDesign.probed`) and what its curves are drawn against
(:attr:`~flashsim.experiments.design.ClaimDesign.time_axis`).

This module is machinery: it holds no study. The tables themselves live with the studies
(:mod:`flashsim.studies.registry`, ``scale.studies.claims``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from flashsim.experiments.design import ClaimDesign


@dataclass(frozen=True)
class Registered:
    """One row of a :class:`Registry`: an experiment's name, its builder, and whether it is a follow-up."""

    name: str
    """What users type (``flashsim reproduce NAME``); the design's ``claim`` must be the same."""
    build: Callable[..., ClaimDesign]
    """Makes the design (the simulator's builders take the profile, the transformer's the base config)."""
    follow_up: bool = False
    """A follow-up experiment: run by name only, never as part of ``all``, reported on a page of its own."""


class Registry(Mapping[str, Registered]):
    """Name → :class:`Registered` row, in registration order; an unknown name is a ``ValueError`` listing the
    names there are."""

    def __init__(self, rows: Iterable[Registered] = ()) -> None:
        self._rows: dict[str, Registered] = {}
        for row in rows:
            self._add(row)

    def _add(self, row: Registered) -> Registered:
        if not isinstance(row.name, str) or not row.name:
            raise ValueError(f"a claim's name must be a non-empty string, got {row.name!r}")
        if row.name in self._rows:
            raise ValueError(f"claim {row.name!r} is already registered")
        if not callable(row.build):
            raise TypeError(f"the builder of {row.name!r} must be callable, got {type(row.build).__name__}")
        self._rows[row.name] = row
        return row

    def register(self, name: str, build: Callable[..., ClaimDesign], *, follow_up: bool = False) -> Registered:
        """Add the row ``name`` → ``build`` (a ``ValueError`` if ``name`` is taken); return it."""
        return self._add(Registered(name, build, follow_up))

    def unregister(self, name: str) -> None:
        """Remove the row ``name`` (a ``ValueError`` listing the names if there is none)."""
        self._rows.pop(self.row(name).name)

    def row(self, name: str) -> Registered:
        if name not in self._rows:
            raise ValueError(f"claim must be one of {', '.join(self._rows)}; got {name!r}")
        return self._rows[name]

    def build(self, name: str, *args: object) -> ClaimDesign:
        """The design of ``name``: its builder called with ``args``."""
        design = self.row(name).build(*args)
        if design.claim != name:
            raise ValueError(f"the builder registered as {name!r} made the design of {design.claim!r}")
        return design

    def names(self, *, follow_up: bool | None = None) -> tuple[str, ...]:
        """The names in registration order: every one, or only the follow-ups (``True``) or only the claims
        (``False``: what ``all`` runs)."""
        return tuple(name for name, row in self._rows.items() if follow_up is None or row.follow_up == follow_up)

    def builders(self, *, follow_up: bool) -> Mapping[str, Callable[..., ClaimDesign]]:
        """A live read-only view name → builder of the claims (``False``) or the follow-ups (``True``)."""
        return _Builders(self, follow_up)

    def __getitem__(self, name: str) -> Registered:
        return self._rows[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


class _Builders(Mapping[str, Callable[..., ClaimDesign]]):
    def __init__(self, registry: Registry, follow_up: bool) -> None:
        self._registry, self._follow_up = registry, follow_up

    def __getitem__(self, name: str) -> Callable[..., ClaimDesign]:
        row = self._registry[name]
        if row.follow_up != self._follow_up:
            raise KeyError(name)
        return row.build

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.names(follow_up=self._follow_up))

    def __len__(self) -> int:
        return len(self._registry.names(follow_up=self._follow_up))


__all__ = ["Registered", "Registry"]
