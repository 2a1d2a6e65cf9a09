"""What the generic engine asks of a model: one function per question, dispatched on the
model's type (`functools.singledispatch`). The generic runs (`headflow.dynamics.ode.run_ode`,
`headflow.dynamics.sde.run_sde`, `headflow.sims.run_sgd`) call only these and the model's own
methods, so they hold nothing model-specific.

The models of the family ([`headflow.dynamics.models.AbstractModel`][], whose state is a
[`headflow.dynamics.models.GramState`][]) get the generic implementations, written once in
`dynamics/ode/_models.py` and `dynamics/sde/_models.py`; a model with more structure to exploit
registers its own (the attention model's: `dynamics/models/attention/`).
"""

from __future__ import annotations

import functools
from typing import Any

from ._errors import HeadflowError


def _unregistered(what: str, model: Any) -> Any:
    raise TypeError(f"{what}: no implementation for a model of type {type(model).__name__}; "
                    "register one (dynamics/hooks.py)")


@functools.singledispatch
def field_of(model: Any, cfg: Any, backend: Any, *, sgd_noise: bool, max_group: int) -> Any:
    """The ODE's vector field of `cfg` for `model` on `backend`'s nodes (an
    [`headflow.dynamics.fields.AbstractField`][]), keeping the `η²` terms when `sgd_noise`."""
    return _unregistered("field_of", model)


@functools.singledispatch
def start_of(model: Any, cfg: Any) -> Any:
    """The ODE's start that `[ode] init` names."""
    return _unregistered("start_of", model)


@functools.singledispatch
def ode_state(model: Any, cfg: Any, state: Any) -> Any:
    """A start of the ODE as the configured vector field reads it (default: unchanged)."""
    del model, cfg
    return state


@functools.singledispatch
def state_risk(model: Any, cfg: Any, states: Any, backend: Any = None) -> tuple[Any, Any]:
    """`(risk, its error)` at every state of `states` (any leading batch axes), as numpy or
    JAX arrays of the batch shape. `backend`: the ODE's expectation backend when the states
    are an ODE trajectory; None: the rule that SGD and the SDE record the risk with
    (`[sim] risk_samples` Monte Carlo nodes of seed `[ode] seed`, common random numbers)."""
    return _unregistered("state_risk", model)


@functools.singledispatch
def ode_info(model: Any, cfg: Any, field: Any) -> dict[str, Any]:
    """What the ODE's accuracy report says about the vector field beyond its measured error
    (the nodes, the form of the right-hand side)."""
    return _unregistered("ode_info", model)


@functools.singledispatch
def learning_curve_of(model: Any, cfg: Any, **options: Any) -> Any:
    """The differentiable learning curve of `cfg` (options: `adjoint`, `checkpoints`,
    `times`)."""
    return _unregistered("learning_curve_of", model)


@functools.singledispatch
def curve_keys(model: Any, cfg: Any) -> tuple[str, ...]:
    """The config keys that the learning curve of `cfg` differentiates through."""
    return _unregistered("curve_keys", model)


@functools.singledispatch
def sde_terms(model: Any, cfg: Any, drift_backend: Any, noise_backend: Any) -> tuple[Any, Any]:
    """`(drift, diffusion)` of the SDE: the vector field with its `η²` terms, and an
    [`headflow.dynamics.sde.AbstractDiffusion`][] on `noise_backend`'s nodes."""
    return _unregistered("sde_terms", model)


@functools.singledispatch
def start_sampler(model: Any, cfg: Any) -> Any:
    """A pytree callable `sample(key, dim)`: one random initialization at dimension `dim`,
    exact in law at any D (the start of each SDE path, as SGD starts)."""
    return _unregistered("start_sampler", model)


@functools.singledispatch
def check_dim(model: Any, dim: int) -> None:
    """A [`headflow.dynamics.HeadflowError`][] when `dim` is too small for the model (default: any
    `dim ≥ 1`)."""
    del model
    if dim < 1:
        raise HeadflowError(f"--dim {dim}: must be >= 1")


@functools.singledispatch
def sde_curve_of(model: Any, cfg: Any, **options: Any) -> Any:
    """The SDE ensemble's mean learning curve of `cfg` as a differentiable function of the
    hyperparameters (options: `paths`, `dim`, `times`, `adjoint`)."""
    return _unregistered("sde_curve_of", model)
