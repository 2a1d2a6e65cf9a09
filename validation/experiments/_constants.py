"""Plain constants of the experiments that the command line shows in `--help` (choices and
defaults). This module imports nothing, so that building the `headflow` parser does not import
JAX; each constant is defined here once and re-exported by the experiment that uses it."""

THEORIES = ("sde", "ode", "ode-per-seed")
"""What `headflow compare --theory` compares SGD with: the SDE ensemble at the run's D, the
ODE from the seed-mean initial overlaps, or one ODE per seed from its own initial overlaps."""

EXTRAPOLATE = (10_000, 100_000, 1_000_000)
"""Default dimensions of the SDE extrapolation (beyond the reach of SGD)."""

MODELS = ("ode", "sde")
"""The models of a curve: `"ode"` ([`headflow.dynamics.ode.curve_from_config`][], the D → ∞ limit
from one initial state) and `"sde"` ([`headflow.dynamics.sde.sde_curve_from_config`][], the mean
over SDE paths at `[sim] dim`: the model of an SGD seed mean when the escapes spread)."""

PRUNABLE_TOLERANCE = 0.05
"""`prunable`: heads removable before the risk exceeds `(1 + 0.05) ×` the unpruned risk."""

CRITERIA = ("greedy", "ablation")
"""The importance criteria of `headflow prune --criterion`."""

BAYES_TOLERANCE = 0.02
"""`headflow activations`: Bayes-softmax with `H = |supp P_θ|` heads reaches `R_Bayes` when its
long-time risk is within `2%` of it."""
