"""The expectation backend that `[ode]` names (`docs/ode.md#expectation-backends`)."""

from __future__ import annotations

from ..config import Config
from ..expectations import AbstractExpectation, get_expectation

AUTO_FALLBACK = 16384
"""`samples = "auto"` where no pilot run is made (sweeps, stability analysis)
(`docs/ode.md#expectation-backends`)."""


def backend_of(cfg: Config) -> AbstractExpectation:
    """The expectation backend of `[ode]` (`expectation`, `samples`, `seed`)."""
    samples = AUTO_FALLBACK if cfg.ode.samples == "auto" else int(cfg.ode.samples)
    return get_expectation(cfg.ode.expectation, samples, seed=cfg.ode.seed)
