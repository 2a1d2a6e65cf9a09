"""Adding a model touches one file: here a single-index model is defined and registered in this
test file alone (`register_model`), with no closed forms (`readout() -> None`: the engine must
use its node backends), and then the config (`[model] kind`), the ODE, weight- and overlap-space
SGD and the SDE all run it. The checks are of the mathematics:

- the drift and the diffusion the engine builds (autodiff of the model's loss on nodes) equal a
  brute-force Monte Carlo mean and covariance of the per-sample increments written out by hand
  here, in numpy;
- SGD in weight space and in overlap space agree with each other in law and, in the seed mean,
  with the ODE;
- the SDE's ensemble at the same D has the mean, spread and law of SGD's final risk.

The model: teacher `y = g(ν) + σζ`, student `ŷ = a g(λ)`, `λ = w·x/√D`, `ν = w*·x/√D`,
`g = tanh`, loss `½(ŷ − y)²`; SGD `w ← (1 − ηκ/D) w − (η/√D) G x` with `G = ∂ℓ/∂λ =
(ŷ − y) a g'(λ)`, and `a ← a − (η_a/D) ∂ℓ/∂a`, `∂ℓ/∂a = (ŷ − y) g(λ)`. Order parameters
`Q = w·w/D`, `R = w·w*/D`, `T = w*·w*/D`, `a`. Every seed is fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st
from jaxtyping import Array, Float, Scalar

from headflow import sims
from headflow.dynamics import ConfigError, Layout, StepSizes
from headflow.dynamics.config import Config
from headflow.dynamics.expectations import MonteCarlo, Quadrature, QuasiMonteCarlo
from headflow.dynamics.fields import ModelField, has_exact_field
from headflow.dynamics.models import (AbstractModel, GramState, Rows, model_class,
                                      model_kinds, model_risk, param, register_model,
                                      unregister_model)
from headflow.dynamics.ode import model_field, run_ode
from headflow.dynamics.sde import ModelDiffusion, run_sde

Z = 5.0  # z-score threshold; all seeds are fixed, so a miss beyond 5σ means a bug
KIND = "single_index_test"


# -- the model: this block is all a new model needs ------------------------------------------------

def g(x):
    return jnp.tanh(x)


class SingleIndex(AbstractModel):
    """Teacher `y = tanh(ν) + σζ`, student `ŷ = a tanh(λ)`; one student and one teacher row."""

    kind: ClassVar[str] = KIND
    rows: ClassVar[Rows] = Rows(students=1, teachers=1, student_std="init_std")
    layout: ClassVar[Layout] = Layout(names=("Q", "R", "a"), per_unit=("R", "a"),
                                      unit_by_unit=("Q",), alignment=("R", "Q"))
    lr_bias_key: ClassVar[str] = "lr_a"           # η_a, the step of the second-layer scalar a
    t_max: ClassVar[float] = 10.0

    noise: Any = param(0.0, ge=0)
    init_std: Any = param(1.0, section="training", ge=0)     # w ~ N(0, s² I)
    init_a: Any = param(1.0, section="training")

    @property
    def trained(self) -> tuple[str, ...]:
        return ("a",)

    def params0(self) -> dict[str, Array]:
        return {"a": jnp.full((1,), self.init_a, jnp.float64)}

    def predict(self, params: Mapping[str, Array], lam: Float[Array, " 1"]) -> Scalar:
        return params["a"][0] * g(lam[0])

    def target(self, params: Mapping[str, Array], lam_star: Float[Array, " 1"]) -> Scalar:
        del params
        return g(lam_star[0])


@pytest.fixture(scope="module")
def registered():
    register_model(SingleIndex)
    yield
    unregister_model(KIND)


# -- the independent reference: the increments written out by hand, in numpy -----------------------

def hand_increments(state: tuple[float, float, float, float], hp: dict, sigma: float, n: int,
                    seed: int) -> np.ndarray:
    """`n` samples of `D ×` the change of `(Q, R, T, a)` in one SGD step as `D → ∞` (the
    `η²` term of a batch of B: `η² G²/B`, its mean being what the drift needs), on fields
    drawn with covariance `[[Q, R], [R, T]]`: (n, 4)."""
    Q, R, T, a = state
    eta, eta_a, kappa, B = hp["lr"], hp["lr_a"], hp["weight_decay"], hp["batch"]
    rng = np.random.default_rng(seed)
    L = np.linalg.cholesky(np.array([[Q, R], [R, T]]))
    lam, nu = L @ rng.standard_normal((2, n))
    zeta = rng.standard_normal(n)
    t = np.tanh(lam)
    delta = a * t - (np.tanh(nu) + sigma * zeta)           # ŷ − y
    G = delta * a * (1.0 - t**2)                            # ∂ℓ/∂λ
    dl_da = delta * t                                       # ∂ℓ/∂a
    dQ = -2.0 * eta * G * lam + eta**2 * G**2 / B - 2.0 * eta * kappa * Q
    dR = -eta * G * nu - eta * kappa * R
    return np.stack([dQ, dR, np.zeros(n), -eta_a * dl_da], axis=1)


def _flat(model: AbstractModel, s: GramState) -> np.ndarray:
    n = model.named(s)
    return np.array([float(np.ravel(n[k])[0]) for k in ("Q", "R", "T", "a")])


STATE = (0.8, 0.45, 1.1, 0.7)           # an off-start state: (Q, R, T, a)


def _gram_state(state) -> GramState:
    Q, R, T, a = state
    return GramState(gram=jnp.array([[Q, R], [R, T]]), params={"a": jnp.array([a])})


# -- the settings: the model, the step sizes, the nodes, the runs ----------------------------------

SIGMA, LR, LR_A, INIT_STD, INIT_A = 0.3, 0.8, 0.6, 0.7, 0.3
D, T_MAX, N_SAVE = 1000, 6.0, 4
TIMES = np.linspace(0.0, T_MAX, N_SAVE)
STEPS = StepSizes(lr=LR, lr_bias=LR_A)
DRIFT = Quadrature(samples=24**3)           # 24³ Gauss–Hermite nodes: fields and label noise
RISK = MonteCarlo(samples=16384, seed=0)    # the risk's nodes, common to every run
SEEDS_W, SEEDS_O, PATHS = range(64), range(1000, 1256), 64
SDE_DT, NOISE_NODES = 0.25, 1024


def make_model() -> SingleIndex:
    return SingleIndex(noise=SIGMA, init_std=INIT_STD, init_a=INIT_A)


def test_registered(registered):
    """The kind is listed, and the model has no closed forms (the engine must use nodes)."""
    assert KIND in model_kinds() and model_class(KIND) is SingleIndex
    model = make_model()
    assert model.readout(model.limit_state().params) is None and not has_exact_field(model)
    with pytest.raises(ValueError, match="this model's risk needs nodes"):
        model_risk(model, model.limit_state())


# -- (a) the drift and the diffusion against the hand-written increments ---------------------------

@pytest.mark.parametrize("case", ["quadrature", "qmc_decay_batch2"])
def test_drift_equals_monte_carlo_of_hand_increments(case):
    """`E[U]` at an off-start state by `ModelField` (autodiff of the model's loss on nodes of
    the fields and the label noise): on the quadrature nodes of the ODE below, and on QMC
    nodes with weight decay and a batch of 2, against a brute-force Monte Carlo mean of the
    hand-written increments (4·10⁶ samples), within 5 standard errors (the field's own error
    estimate added)."""
    model = make_model()
    if case == "quadrature":
        hp = dict(lr=LR, lr_a=LR_A, weight_decay=0.0, batch=1)
        field = ModelField.build(model, STEPS, DRIFT)
    else:
        hp = dict(lr=1.3, lr_a=0.4, weight_decay=0.25, batch=2)
        steps = StepSizes(lr=hp["lr"], lr_bias=hp["lr_a"], weight_decay=hp["weight_decay"],
                          batch=2)
        field = ModelField.build(model, steps, QuasiMonteCarlo(samples=1 << 15, seed=3))
    rhs, err = eqx.filter_jit(lambda f, s: f.with_error(s))(field, _gram_state(STATE))
    got, got_err = _flat(model, rhs), np.abs(_flat(model, err))
    U = hand_increments(STATE, hp, SIGMA, 4_000_000, seed=1)
    want, se = U.mean(axis=0), U.std(axis=0) / np.sqrt(len(U))
    assert got[2] == 0.0                                     # the teacher does not move
    z = (got - want)[[0, 1, 3]] / np.sqrt(se**2 + got_err**2)[[0, 1, 3]]
    print(f"drift ({case}): got {got}, hand MC {want} ± {se}, z = {np.round(z, 2)}")
    assert np.all(np.abs(z) < Z), (got, want, se, got_err, z)
    # the drift is far from zero, so this is not a trivial agreement
    assert np.all(np.abs(want[[0, 1, 3]]) > 20 * se[[0, 1, 3]]), (want, se)
    if case == "quadrature":                 # the ODE's drift: a tight estimate
        assert np.all(got_err[[0, 1, 3]] < 3e-3 * np.abs(got[[0, 1, 3]])), got_err


def test_diffusion_equals_covariance_of_hand_increments():
    """The SDE's diffusion (`ModelDiffusion.matrix`, `Cov[U]/B` on Monte Carlo nodes of the
    fields and the label noise) against the covariance of the hand-written increments, entry by
    entry within 5 standard errors of both estimates; the teacher's row and column vanish."""
    model = make_model()
    n_nodes = 1 << 16
    diff = ModelDiffusion.build(model, STEPS, MonteCarlo(samples=n_nodes, seed=5))
    s = _gram_state(STATE)
    sigma_mat = np.asarray(eqx.filter_jit(lambda d, s: d.matrix(s))(diff, s))
    # the flattened coordinates: the upper triangle (Q, R, T), then a
    np.testing.assert_array_equal(np.asarray(diff.flatten(s)), STATE)
    np.testing.assert_array_equal(sigma_mat[2], 0.0)
    np.testing.assert_array_equal(sigma_mat[:, 2], 0.0)
    U = hand_increments(STATE, dict(lr=LR, lr_a=LR_A, weight_decay=0.0, batch=1), SIGMA,
                        2_000_000, seed=2)
    Uc = U - U.mean(axis=0)
    zs = {}
    for i, j in [(0, 0), (0, 1), (1, 1), (0, 3), (1, 3), (3, 3)]:
        prod = Uc[:, i] * Uc[:, j]
        want = prod.mean()
        se = prod.std() * np.sqrt(1.0 / len(U) + 1.0 / n_nodes)
        zs[(i, j)] = (sigma_mat[i, j] - want) / se
        if i == j:
            assert want > 20 * se
    print("diffusion z-scores:", {k: round(float(v), 2) for k, v in zs.items()})
    assert max(abs(v) for v in zs.values()) < Z, zs


# -- (b), (c): ODE, SGD in both spaces, SDE --------------------------------------------------------

TOML = f"""
[model]
kind = "{KIND}"
noise = {SIGMA}

[training]
lr = {LR}
lr_a = {LR_A}
init_std = {INIT_STD}
init_a = {INIT_A}
t_max = {T_MAX}

[ode]
expectation = "quadrature"
samples = {DRIFT.samples}
init = "symmetric"

[sim]
dim = {D}
seeds = {len(SEEDS_W)}
risk_samples = {RISK.samples}

[sde]
paths = {PATHS}
dt = {SDE_DT}
samples_noise = {NOISE_NODES}

[output]
n_save = {N_SAVE}
"""


def scalar(x) -> np.ndarray:
    """A named order parameter of this model (trailing unit axes of size 1) as batch axes."""
    x = np.asarray(x)
    while x.ndim and x.shape[-1] == 1:
        x = x[..., 0]
    return x


@pytest.fixture(scope="module")
def cfg(registered) -> Config:
    return Config.from_toml(TOML)


@pytest.fixture(scope="module")
def runs(cfg):
    """Through the config, at D = 1000, t ≤ 6: `run_ode` from the D → ∞ start (the mean of
    the random starts), `run_sgd` in weight space (float32, seeds 0–63) and in overlap space
    (seeds 1000–1255), `run_sde` (64 paths); the risk of each on the same Monte Carlo nodes."""
    res = {"ode": run_ode(cfg), "weights": sims.run_sgd(cfg),
           "overlaps": sims.run_sgd(cfg.replace(**{"sim.space": "overlaps",
                                                   "sim.seed": SEEDS_O[0],
                                                   "sim.seeds": len(SEEDS_O)})),
           "sde": run_sde(cfg)}
    for r in res.values():
        np.testing.assert_allclose(np.asarray(r.t), TIMES, atol=1e-12)
    assert res["weights"].seeds == tuple(SEEDS_W) and res["overlaps"].seeds == tuple(SEEDS_O)
    assert bool(np.all(np.asarray(res["sde"].valid)))
    model = cfg.build_model()
    out = {name: r.overlaps for name, r in res.items()}
    risk = {name: np.asarray(r.risk) for name, r in res.items()}
    finals = {name: {**{k: scalar(v)[..., -1] for k, v in model.named(out[name]).items()},
                     "risk": risk[name][..., -1]} for name in out}
    return model, out, risk, finals


@pytest.mark.slow
def test_sgd_weights_and_overlaps_agree_with_the_ode(runs):
    """At the final time: for Q, R, a and the risk, two-sample KS between the two simulators
    (Bonferroni over the 4 quantities, p ≥ 0.01) and their seed means within 5 standard
    errors of each other and of the ODE. The dynamics moved far beyond those error bars; the
    initial states are the Gram matrices of random weights in both spaces."""
    model, out, risk, f = runs
    names = ("Q", "R", "a", "risk")
    pvals = {k: st.ks_2samp(f["weights"][k], f["overlaps"][k]).pvalue for k in names}
    print("KS weights vs overlaps:", {k: round(float(p), 3) for k, p in pvals.items()})
    assert min(pvals.values()) * len(pvals) >= 0.01, pvals
    for k in names:
        x, y = f["weights"][k], f["overlaps"][k]
        z = (x.mean() - y.mean()) / np.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y))
        assert abs(z) < Z, (k, x.mean(), y.mean(), z)
    for space in ("weights", "overlaps"):
        zs = {}
        for k in names:
            x = f[space][k]
            zs[k] = (x.mean() - float(f["ode"][k])) / (x.std(ddof=1) / np.sqrt(len(x)))
        print(f"SGD ({space}) seed mean vs ODE, z:", {k: round(float(v), 2)
                                                      for k, v in zs.items()})
        assert max(abs(v) for v in zs.values()) < Z, (space, zs)
    print("ODE at t = 6:", {k: round(float(v), 4) for k, v in f["ode"].items()})
    ode0 = {k: float(scalar(v)[0]) for k, v in model.named(out["ode"]).items()}
    assert f["ode"]["R"] - ode0["R"] > 0.3 and f["ode"]["a"] - ode0["a"] > 0.1
    assert f["ode"]["risk"] < 0.7 * risk["ode"][0]
    # the t = 0 states: Gram matrices of random initial weights, T = 1 ± (2/D)^{1/2}
    for space in ("weights", "overlaps"):
        T0 = scalar(model.named(out[space])["T"])[:, 0]
        assert abs(T0.mean() - 1.0) < Z * np.sqrt(2.0 / D / len(T0))
        assert abs(T0.std() / np.sqrt(2.0 / D) - 1.0) < 0.3


@pytest.mark.slow
def test_sde_final_risk_matches_sgd(runs):
    """The SDE's 64 paths against SGD's seeds (both spaces pooled, 320 runs): the final risk's
    mean within 5 standard errors, its spread (log ratio of standard deviations within 5 of
    its standard errors) and its law (two-sample KS, p ≥ 0.01/2); the same for R. Every path
    is a Gram matrix at every save time."""
    _, out, _, f = runs
    gram = np.asarray(out["sde"].gram)
    assert np.all(np.isfinite(gram)) and np.all(np.linalg.eigvalsh(gram)[..., 0] > 0)
    for k in ("risk", "R"):
        x = f["sde"][k]
        y = np.concatenate([f["weights"][k], f["overlaps"][k]])
        z = (x.mean() - y.mean()) / np.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y))
        log_ratio = np.log(x.std(ddof=1) / y.std(ddof=1))
        se_log = np.sqrt(1 / (2 * (len(x) - 1)) + 1 / (2 * (len(y) - 1)))
        p = st.ks_2samp(x, y).pvalue
        print(f"SDE vs SGD {k}: mean {x.mean():.5f} vs {y.mean():.5f} (z = {z:.2f}), std "
              f"{x.std(ddof=1):.5f} vs {y.std(ddof=1):.5f} (z = {log_ratio / se_log:.2f}), "
              f"KS p = {p:.3f}")
        assert abs(z) < Z and abs(log_ratio) < Z * se_log and p >= 0.01 / 2, k
    # the spread is the finite-D one, not round-off: about D^{-1/2}
    assert 0.1 / np.sqrt(D) < f["sde"]["R"].std() < 10 / np.sqrt(D)


def test_config_sections(cfg):
    """`[model] kind = "single_index_test"` reads the model's own sections (defaults filled
    in, unknown keys and bad values one-line errors) and builds the objects checked in (a):
    the model, the step sizes, the drift on the same nodes; with no closed forms the
    expectation defaults to QMC nodes."""
    assert type(cfg.model) is SingleIndex.section() and cfg.model.noise == SIGMA
    assert type(cfg.training) is SingleIndex.training() and cfg.training.weight_decay == 0.0
    assert cfg.build_model() == make_model()
    assert StepSizes.from_config(cfg.training) == STEPS
    field = model_field(cfg)
    assert isinstance(field, ModelField)
    np.testing.assert_array_equal(np.asarray(field.nodes.x),
                                  np.asarray(ModelField.build(make_model(), STEPS, DRIFT).nodes.x))
    np.testing.assert_array_equal(cfg.save_times(), TIMES)
    assert Config.from_toml(f'[model]\nkind = "{KIND}"').ode.expectation == "qmc"
    with pytest.raises(ConfigError, match=r"model.noise = -1.0: must be"):
        Config.from_toml(f'[model]\nkind = "{KIND}"\nnoise = -1.0')
    with pytest.raises(ConfigError, match=r"unknown config key training.lr_bias"):
        Config.from_toml(f'[model]\nkind = "{KIND}"\n[training]\nlr_bias = 1.0')


def test_exact_expectation_refused(registered):
    """A model without closed forms refuses `ode.expectation = "exact"` with a one-line
    config error."""
    with pytest.raises(ConfigError, match=r"ode.expectation = 'exact'"):
        Config.from_toml(f'[model]\nkind = "{KIND}"\n[ode]\nexpectation = "exact"')
