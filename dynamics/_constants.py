"""Plain constants of `dynamics` that the command line shows in `--help`.

This module imports nothing, so that `headflow.validation.commands._light` can load it without
running `dynamics/__init__.py` (which imports JAX). Each constant is defined here once and
re-exported by the module that uses it ([`headflow.dynamics.measures`][],
[`headflow.dynamics.expectations`][], [`headflow.dynamics.analysis`][]).
"""

ESCAPE_THRESHOLD = 0.2
"""Head spread that marks the end of the unspecialized plateau. A random start at dimension D
has differences `≈ √(2/D)` (0.09 at D = 250); specialized heads differ by O(1)."""

MIN_SAMPLES = 64
"""The fewest nodes headflow accepts for an expectation: with fewer, the error estimate that
comes with every number (a spread over nodes or replicates) is itself unreliable."""

STATIONARY_Z = 0.25
"""Default `z`: stationary when `|RHS_i| ≤ z·err_i + atol` for every component."""
