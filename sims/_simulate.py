"""Running online SGD of a configuration over seeds and recording the order parameters on a
time grid: [`run_sgd`][], the same for every model (the model's exact maps come from its `sgd`
method, [`simulate_states`][])."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from headflow.dynamics import Config
from headflow.dynamics.models import AbstractModel
from headflow.dynamics.ode import model_arrays, named_start

from ._runs import simulate_sgd


class SGDResult(eqx.Module):
    """A recorded SGD run over seeds.

    `t` (T) in units of steps/D, `steps` (T), `overlaps` with leaves `(S, T, ...)`,
    `risk` and `risk_err` (S, T): the exact population risk of the weights at each save point
    (their fields are exactly Gaussian) evaluated by Monte Carlo over the fields with common
    random numbers, and its Monte Carlo standard error.
    """

    t: Float[Array, " T"]
    steps: Int[Array, " T"]
    overlaps: Any
    risk: Float[Array, "S T"]
    risk_err: Float[Array, "S T"]
    seeds: tuple[int, ...] = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    model: Any = None
    """The model (its `named` view gives the arrays)."""

    def arrays(self) -> dict[str, np.ndarray]:
        """The `sgd.npz` arrays (see the README)."""
        named = model_arrays(self.model, self.overlaps)
        return {"t": np.asarray(self.t), "steps": np.asarray(self.steps),
                "risk": np.asarray(self.risk), "risk_err": np.asarray(self.risk_err),
                **named, "seeds": np.asarray(self.seeds)}


def simulate_states(model: AbstractModel, cfg: Config, *, dim: int, seeds: list[int],
                    times: np.ndarray, start: Any, progress: bool) -> tuple[np.ndarray, Any]:
    """`(steps at the save times, states with leaves (S, T, ...))` of online SGD of `model` as
    `cfg` configures it (`[training]`, `[sim] space`, `dtype`), one run per seed of `seeds`,
    every seed from `start` when given (one state, no seed axis): the model's maps
    (`model.sgd`) run by the one driver ([`headflow.sims.simulate_sgd`][])."""
    sgd = model.sgd(cfg, dim=dim, start=start)
    steps, _, _, recorded = simulate_sgd(sgd, seeds=seeds, times=times, progress=progress)
    return steps, sgd.states(recorded)


def run_sgd(cfg: Config, *, dim: int | None = None, seeds: int | None = None,
            start: Any = None, progress: bool = False,
            times: np.ndarray | None = None) -> SGDResult:
    """Online SGD as configured (`[model]`, `[training]`, `[sim]`, `[output]`), in weight or
    overlap space (`[sim] space`), with its recorded risk; `dim`, `seeds` override `[sim]`,
    `start` is the initial state of every seed (default: random)."""
    model = cfg.build_model()
    D = cfg.sim.dim if dim is None else int(dim)
    n = cfg.sim.seeds if seeds is None else int(seeds)
    seed_list = list(range(cfg.sim.seed, cfg.sim.seed + n))
    times = cfg.save_times() if times is None else np.asarray(times)
    if start is None and isinstance(cfg.ode.init, dict):
        start = named_start(cfg, model)     # `[ode] init` names the start of every seed
    if start is not None:
        model.check_state(start)
    steps, states = simulate_states(model, cfg, dim=D, seeds=seed_list, times=times,
                                    start=start, progress=progress)
    risk, err = model.state_risk(cfg, states)
    return SGDResult(t=jnp.asarray(steps / D), steps=jnp.asarray(steps), overlaps=states,
                     risk=jnp.asarray(risk), risk_err=jnp.asarray(err), seeds=tuple(seed_list),
                     dim=D, model=model)
