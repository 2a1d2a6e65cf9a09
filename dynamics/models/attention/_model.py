"""The attention model as a member of the family: [`Model`][], the single-location predictor
(`headflow.dynamics._model`) with the methods of [`headflow.dynamics.models.AbstractModel`][]
that it answers with its own structure (the reduced field on the invariant manifold, the
analytic value integrals, the generated right-hand side, its starts, its risk, its diffusion,
its SGD maps, its learning curves' pieces and its config checks); its parameters are its
fields, from which the engine derives its `[model]` and `[training]` tables."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jax.tree_util import Partial
from jaxtyping import Array, Float, Scalar

from ..._errors import ConfigError, HeadflowError, check_memory
from ..._model import AttentionBase
from ..._overlaps import Overlaps
from ..._risk import risk_nodes
from ..._steps import StepSizes
from ..._value_moments import SIGNAL
from ..._weights import weights_from_overlaps
from ...activations import AbstractActivation, get_activation
from ...config import Config, PriorSection
from ...expectations import AUTO_MAX_SAMPLES, AbstractExpectation, MonteCarlo
from ...fields import MAX_GROUP, AbstractField
from ...ode import risk_rule, traced_values
from ...ode._backend import backend_of
from ...priors import AbstractPrior
from ...sde import noise_samples
from .._base import register_model
from .._model import AbstractModel
from .._params import Hyperparameter, param
from .._sgd import AbstractSGD
from ._chain import AttentionChainSGD
from ._curve import AttentionRisk, AttentionStart, hyperparameters
from ._diffusion import Diffusion
from ._full import FullField
from ._ode import field_class, resolved_rhs, trajectory_risk
from ._sgd import AttentionWeightSGD
from ._start import initial_overlaps, random_start


def _default_prior() -> AbstractPrior:
    # built on demand: a prior holds JAX arrays, and importing headflow must not start JAX's
    # backend (`jax.distributed.initialize` has to come first)
    return PriorSection().build(1)


@register_model
class Model(AttentionBase, AbstractModel):  # type: ignore[misc]  # its predictor reads tokens
    """The multi-head single-location attention model (built in; `docs/model.md`).

    A member of the family: its state is an [`headflow.dynamics.Overlaps`][], its predictor
    `predict(χ, z, b)` reads the key and value fields of every token, and it overrides every
    engine method with its own structure (`docs/models.md`).

    **Fields:** `L` tokens, `H` heads, `activation`, `prior` (its `F` latent directions), label
    noise `noise` (Δ), `rho` (`|v*|²/D`), `train_values` (False: `v_h` frozen to `v*`)."""

    kind: ClassVar[str] = "attention"
    extra_sections: ClassVar[tuple[str, ...]] = ("prior",)
    lr_bias_key: ClassVar[str] = "lr_bias"
    lr_bias_default: ClassVar[float | None] = 1.0
    """The biases step with `training.lr_bias` (`η_b`, default 1, its own value)."""

    L: int = param(4, ge=1, help="tokens per sequence")
    H: int = param(2, ge=1, help="attention heads")
    F: int = param(1, ge=1, help="latent directions (the dimension of [prior])")
    activation: AbstractActivation = param("bayes_softmax", convert=get_activation,
                                           static=False, help="the heads' activation")
    prior: AbstractPrior = eqx.field(default_factory=_default_prior)
    noise: float = param(0.0, ge=0, help="Δ, the label noise")
    rho: float = param(1.0, gt=0, help="ρ* = |v*|²/D, the teacher value's norm")
    train_values: bool = param(True, help="train the values v_h (false: frozen to v*)")
    init_key_std: float = param(0.1, section="training", ge=0,
                                help="keys' entries N(0, s²) at the start")
    init_value_std: float = param(0.1, section="training", ge=0,
                                  help="values' entries N(0, s²) at the start")
    init_bias: float = param(0.0, section="training", help="the biases at the start")

    @property
    def trained(self) -> tuple[str, ...]:
        """The scalar parameters SGD moves: the biases `b` (step `training.lr_bias`)."""
        return ("b",)

    @classmethod
    def default_expectation(cls, model: Any, training: Any, *,
                            checked: bool = False) -> str | None:
        """None: the `[ode]` section's default (`"qmc"`)."""
        return None

    @classmethod
    def check_config(cls, cfg: Config) -> dict[str, Any]:
        """One-line errors for a config the attention model cannot run (closed-form or named
        starts, a prior that does not fit, a dimension too small for its teacher or for the
        overlap chain, arrays that cannot fit in memory); returns `[prior]` with its defaults
        filled in."""
        if cfg.ode.expectation == "exact":
            raise ConfigError("ode.expectation = 'exact': closed forms exist for models of "
                              "units with Gaussian integrals (model.kind = 'committee'); "
                              "choose 'mc', 'qmc', 'quadrature' or 'sparse'")
        if isinstance(cfg.ode.init, dict):
            raise ConfigError("ode.init: a table of named order parameters is for models of "
                              "the family; the attention model takes 'random' or 'symmetric'")
        m, tr, sim = cfg.model, cfg.training, cfg.sim
        prior = cfg.prior.resolved(m.F)
        built = prior.build(m.F)    # the prior classes check the rest (weights, p, var > 0)
        if sim.dim < m.F + 1:
            raise ConfigError(f"sim.dim = {sim.dim}: must exceed model.F = {m.F} (the teacher "
                              "needs F + 1 orthogonal directions)")
        if sim.space == "overlaps":
            need = (2 * m.H if m.train_values else m.H) + m.F + 1 + m.L * tr.batch + 1
            if sim.dim < need:
                raise ConfigError(f"sim.dim = {sim.dim}: sim.space = 'overlaps' needs "
                                  f"D >= N + B·L + 1 = {need} (the Wishart remainder)")
        dims = int(built.n_node_dims) + m.L * (m.F + m.H)   # θ and the key fields
        ode = cfg.ode
        samples = AUTO_MAX_SAMPLES if ode.samples == "auto" else int(ode.samples)
        check_memory(f"ode.samples = {ode.samples} (nodes of dimension {dims})",
                     8.0 * samples * dims)
        check_memory(f"sim.risk_samples = {sim.risk_samples}", 8.0 * sim.risk_samples * dims)
        if sim.space == "weights":        # the overlap chain holds no D-vectors
            rows = 2 * m.H + m.F + 1 + m.L * tr.batch
            check_memory(f"sim.dim = {sim.dim} with sim.seeds = {sim.seeds}",
                         8.0 * sim.dim * sim.seeds * rows)
        return {"prior": prior}

    def target(self, params: Mapping[str, Array], lam_star: Float[Array, "F1 tokens"]
               ) -> Scalar:
        """The teacher's noiseless label on its fields `λ*` (rows: the `F` key directions,
        then `v*`; columns: the tokens), with the planted latent at the token `SIGNAL`:
        `y* = v*·x_SIGNAL/√D`, the last row's field at that token."""
        del params
        return lam_star[-1, SIGNAL]

    # -- the ODE ------------------------------------------------------------------------------
    def vector_field(self, cfg: Config, backend: AbstractExpectation | None = None, *,
                     sgd_noise: bool, max_group: int = MAX_GROUP) -> AbstractField:
        """The field that `[ode] form` and `[ode] rhs` select ([`field_class`][])."""
        backend = backend_of(cfg) if backend is None else backend
        return field_class(cfg, self).build(traced_values(self),
                                            traced_values(StepSizes.from_config(cfg.training)),
                                            backend, sgd_noise=sgd_noise, max_group=max_group)

    def ode_start(self, cfg: Config) -> Overlaps:
        """The start `[ode] init` describes, with the scales of `[training]`."""
        tr = cfg.training
        return eqx.filter_jit(initial_overlaps)(
            self, jr.key(cfg.sim.seed), cfg.sim.dim, init=str(cfg.ode.init),
            key_std=tr.init_key_std, value_std=tr.init_value_std, bias=tr.init_bias,
            manifold=cfg.ode.form == "manifold")

    def ode_state(self, cfg: Config, state: Any) -> Overlaps:
        """The state on the invariant manifold for `[ode] form = "manifold"`."""
        if not isinstance(state, Overlaps):     # the rest is checked by `build` after this
            raise HeadflowError(f"initial state: the attention model's state is an Overlaps, "
                                f"not a {type(state).__name__}")
        return state.on_manifold() if cfg.ode.form == "manifold" else state

    def state_risk(self, cfg: Config, states: Overlaps,
                   backend: AbstractExpectation | None = None) -> tuple[Array, Array]:
        """On the ODE's own nodes and form for a trajectory of it (`backend`); else as SGD
        records it, `[sim] risk_samples` Monte Carlo nodes of seed `[ode] seed`, all
        overlaps."""
        manifold = backend is not None and cfg.ode.form == "manifold"
        if backend is None:
            backend = risk_rule(cfg)
        batch = states.b.shape[:-1]
        flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[len(batch):]), states)
        risk, err = trajectory_risk(self, flat, backend, manifold=manifold)
        return jnp.reshape(risk, batch), jnp.reshape(err, batch)

    def ode_info(self, cfg: Config, field: AbstractField) -> dict[str, Any]:
        """The right-hand side the run used (`"symbolic"` or `"autodiff"`)."""
        del field
        return {"rhs": resolved_rhs(cfg, self)}

    def hyperparameters(self, cfg: Any, steps: StepSizes) -> tuple[Hyperparameter, ...]:
        """Those of [`PARAMS`][headflow.dynamics.models.attention.PARAMS] that `cfg` has
        ([`hyperparameters`][])."""
        return hyperparameters(cfg, steps)

    def curve_start(self, cfg: Config, *, sde: bool = False) -> AttentionStart:
        """[`AttentionStart`][] with the scales of `[training]`."""
        tr = cfg.training
        f64 = lambda x: jnp.asarray(x, jnp.float64)  # noqa: E731
        return AttentionStart(model=self, key_std=f64(tr.init_key_std),
                              value_std=f64(tr.init_value_std), bias=f64(tr.init_bias),
                              init=str(cfg.ode.init), manifold=cfg.ode.form == "manifold",
                              sde=sde)

    def curve_risk(self, cfg: Config, *, sde: bool = False) -> AttentionRisk:
        """On the ODE's nodes and form ([`AttentionRisk`][]); for the SDE, as SGD records it
        (`[sim] risk_samples` Monte Carlo nodes of seed `[ode] seed`, all overlaps)."""
        if sde:
            return AttentionRisk(nodes=risk_nodes(self, risk_rule(cfg)))
        return AttentionRisk(nodes=risk_nodes(self, backend_of(cfg)),
                             manifold=cfg.ode.form == "manifold")

    # -- the SDE ------------------------------------------------------------------------------
    def sde_terms(self, cfg: Config, drift_backend: AbstractExpectation | None,
                  noise_backend: AbstractExpectation | None) -> tuple[FullField, Diffusion]:
        """Drift [`FullField`][] (η² terms kept; on `drift_backend`, default the nodes of
        `[ode]`) and the [`Diffusion`][] of all fields (on `noise_backend`, default
        [`headflow.dynamics.sde.noise_samples`][] Monte Carlo nodes)."""
        if drift_backend is None:
            drift_backend = backend_of(cfg)
        if noise_backend is None:
            noise_backend = MonteCarlo(samples=noise_samples(cfg), seed=cfg.ode.seed)
        mt = traced_values(self)
        steps = traced_values(StepSizes.from_config(cfg.training))
        return (FullField.build(mt, steps, drift_backend, sgd_noise=True),
                Diffusion.build(mt, steps, noise_backend, sgd_noise=True))

    def start_sampler(self, cfg: Config) -> Partial:
        """[`random_start`][] with the scales of `[training]`."""
        tr = cfg.training
        return Partial(random_start, self, key_std=float(tr.init_key_std),
                       value_std=float(tr.init_value_std), bias=float(tr.init_bias))

    def check_dim(self, dim: int) -> None:
        """`dim` must exceed `F` (the teacher needs `F + 1` orthogonal directions)."""
        if dim < self.F + 1:
            raise HeadflowError(f"--dim {dim}: must exceed model.F = {self.F} (the teacher "
                                "needs F + 1 orthogonal directions)")

    # -- online SGD ---------------------------------------------------------------------------
    def sgd(self, cfg: Config, *, dim: int, start: Any = None) -> AbstractSGD:
        """[`AttentionWeightSGD`][] (`[sim] space = "weights"`, in `[sim] dtype`) or
        [`AttentionChainSGD`][] (`"overlaps"`), with the step sizes and initial scales of
        `[training]`; from `start` (overlaps, one state), every seed: weights with exactly
        these overlaps ([`headflow.dynamics.weights_from_overlaps`][]) or the overlaps
        themselves."""
        tr = cfg.training
        hp = StepSizes.from_config(tr)
        init_std = (tr.init_key_std, tr.init_value_std, tr.init_bias)
        ov0 = (None if start is None
               else jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), start))
        if cfg.sim.space == "overlaps":
            init = None if ov0 is None else functools.partial(_same_start, ov0)
            return AttentionChainSGD(model=self, hp=hp, dim=int(dim), init=init,
                                     init_std=init_std)
        dtype = jnp.dtype(cfg.sim.dtype)
        winit = (None if ov0 is None
                 else functools.partial(_weights_of, ov0, rho=self.rho, dtype=dtype))
        return AttentionWeightSGD(model=self, hp=hp, dim=int(dim), init=winit,
                                  init_std=init_std, dtype=dtype)


def _same_start(ov: Overlaps, key: Any) -> Overlaps:
    del key
    return ov


def _weights_of(ov: Overlaps, key: Any, teacher: Any, *, rho: float, dtype: Any) -> Any:
    return weights_from_overlaps(key, ov, teacher, rho, dtype=dtype)
