"""Single- and multi-index models, a teacher activation of its own, and what each unit states
about itself.

- Every unit's information exponent and parity, computed from the unit, equal the textbook
  values written here; `sign` is refused as a student's activation in one line.
- The correlation loss `−ŷ y` of a matched `He_k` student (`docs/index-models.md`) has, at
  `Q = T = 1` and overlap `ρ`, the drift `dR/dt = η a k·k! ρ^{k−1}`, `dQ/dt = 2η a k·k! ρ^k +
  η² E[G²]` and, at `ρ = 0`, `E[G²] = a² k·k! (k! + σ²)` (Mehler's `E[He_j(u) He_k(v)] =
  δ_jk k! ρ^k` and `x He_k = He_{k+1} + k He_{k−1}`, worked out by hand): the engine's exact
  drift equals them to round-off.
- The risk of mixed polynomial units (a `He_2` student learning a `He_3` teacher) equals its
  Gaussian moments written out here, in the single-index model and in the committee.
- The matched `He_2` model's ODE from the symmetric start keeps `R = 0` to 1e-12 (the even
  teacher's sign flip is a symmetry of the exact drift).
- A multi-index teacher written as a formula: only numbers, fields, arithmetic and units are
  accepted; its value equals the same function written here; each direction's information
  exponent is the textbook one (a staircase's second direction has none alone).
- A free-norm `He_3` student under the square loss shrinks its norm instead of aligning.
- The escape of a matched spherical `He_2` student (k = 2) from `R ≈ 0`: the SDE's escape
  times and the overlap chain's agree in law at D = 400.
- A spherical student (`|w|² = D` restored after every step): the drift of `R` is the projected
  one, `η a k·k! ρ^{k−1}(1 − ρ²) − (η²/2) ρ E[G²]`, with `E[G²] = a²(1 + σ²)` (`He_1`) and
  `4a²(2 + 8ρ² + σ²)` (`He_2`) written out by hand; both simulators keep `Q = 1` exactly.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from headflow import sims
from headflow.dynamics import ConfigError, StepSizes, load_config
from headflow.dynamics.fields import exact_field, has_exact_field
from headflow.dynamics.models import Committee, GramState, SignFlip, SingleIndex, model_risk
from headflow.dynamics.ode import run_ode
from headflow.dynamics.units import Formula, get_unit, unit_names
from headflow.validation.experiments.escape import escape_distributions
from headflow.validation.experiments.index_laws import (DirectionAlignment, at_dim, equator_rate,
                                                       escape_laws, power_fit)

TEXTBOOK = {"erf": (1, -1), "relu": (1, 0), "linear": (1, -1), "he1": (1, -1),
            "he2": (2, 1), "he3": (3, -1), "he4": (4, 1), "square": (2, 1), "tanh": (1, -1),
            "abs": (2, 1), "sign": (1, -1)}
"""`(information exponent, parity)` of each unit: `He_k` has only its k-th coefficient; `x²`
and `|x|` are even with a non-zero second coefficient; the odd units and ReLU (`x/2` plus an
even part) start at the first."""


def test_every_unit_states_its_exponent_and_parity():
    assert set(TEXTBOOK) == set(unit_names())
    for name, want in TEXTBOOK.items():
        unit = get_unit(name)
        assert (unit.information_exponent(), unit.parity()) == want, name


@pytest.mark.parametrize("kind", ["single_index", "committee"])
def test_sign_is_a_teacher_only_unit(kind):
    with pytest.raises(ConfigError, match=r"^model.activation = 'sign': a teacher-only unit"):
        load_config(None, [f'model.kind="{kind}"', 'model.activation="sign"'])
    cfg = load_config(None, [f'model.kind="{kind}"', 'model.activation="erf"',
                             'model.teacher_activation="sign"'])
    model = cfg.build_model()
    nu = jnp.array([0.3, -1.2])[: model.n_teachers]
    params = model.limit_state().params
    assert float(model.target(params, nu)) == pytest.approx(
        float(np.sum(np.asarray(params.get("A", jnp.ones(1))) * np.sign(nu))))
    assert cfg.ode.expectation == "qmc" and not has_exact_field(model)
    with pytest.raises(ConfigError, match="no closed-form Gaussian integrals"):
        load_config(None, [f'model.kind="{kind}"', 'model.teacher_activation="sign"',
                           'ode.expectation="exact"'])


def _state(Q: float, R: float, a: float) -> GramState:
    return GramState(gram=jnp.array([[Q, R], [R, 1.0]]), params={"a": jnp.array([a])})


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_correlation_loss_drift_is_the_hermite_closed_form(k):
    sigma, a, eta, rho = 0.3, 0.7, 0.4, 0.35
    model = SingleIndex(unit=get_unit(f"he{k}"), loss_kind="correlation", noise=sigma,
                        init_second=a)
    assert has_exact_field(model)
    kk = k * math.factorial(k)

    def drift(lr, r):
        return model.named(exact_field(model, StepSizes(lr=lr, lr_bias=lr))(0.0, _state(1.0, r, a)))

    at_rho, twice = drift(eta, rho), drift(2 * eta, rho)
    np.testing.assert_allclose(float(at_rho["R"][0, 0]), eta * a * kk * rho ** (k - 1),
                               rtol=1e-12)
    # dQ = 2η c + η² E[G²]: the first-order part from two step sizes, c = a k·k! ρ^k
    c = (4 * float(at_rho["Q"][0, 0]) - float(twice["Q"][0, 0])) / (4 * eta)
    np.testing.assert_allclose(c, a * kk * rho**k, rtol=1e-10)
    at_zero = drift(eta, 0.0)
    np.testing.assert_allclose(float(at_zero["Q"][0, 0]),
                               eta**2 * a**2 * kk * (math.factorial(k) + sigma**2), rtol=1e-12)
    assert float(at_zero["R"][0, 0]) == pytest.approx(eta * a if k == 1 else 0.0, abs=1e-14)
    assert float(at_zero["a"][0]) == 0.0 and float(at_zero["T"][0, 0]) == 0.0


def _he2_he2(a, b, c):
    """`E[He_2(x) He_2(y)]` for `(x, y)` of variances `a`, `b` and covariance `c`:
    `E[x²y²] − a − b + 1`, with `E[x²y²] = ab + 2c²`."""
    return (a - 1) * (b - 1) + 2 * c**2


def _he3_he3(a, b, c):
    """`E[He_3(x) He_3(y)]`: `E[x³y³] − 3E[x³y] − 3E[xy³] + 9c`, with `E[x³y³] = 9abc + 6c³`,
    `E[x³y] = 3ac`."""
    return 9 * c * (a - 1) * (b - 1) + 6 * c**3


def test_mixed_polynomial_units_risk_is_gaussian_moments():
    """`ε_g = ½ E[(Σ v_i He_2(λ_i) − Σ A_n He_3(ν_n))²]`: the cross terms vanish (odd), the
    others are the Gaussian moments above; for one student and teacher at unit variances,
    Mehler's `½ (2a² + 6)` whatever `R`."""
    a = 0.7
    model = SingleIndex(unit=get_unit("he2"), teacher_unit=get_unit("he3"), init_second=a)
    assert model.polynomial_degree() == 3 and model.readout(model.params0()) is None
    for R in (0.0, 0.4, -0.8):
        risk, err = model_risk(model, _state(1.0, R, a))
        assert float(err) < 1e-12                   # exact nodes: a round-off estimate
        np.testing.assert_allclose(float(risk), 0.5 * (2 * a**2 + 6), rtol=1e-12)
    cfg = load_config(None, ['model.kind="committee"', "model.K=2", "model.M=2",
                             'model.activation="he2"', 'model.teacher_activation="he3"'])
    com = cfg.build_model()
    assert isinstance(com, Committee) and cfg.ode.expectation == "exact"
    Qm = np.array([[1.2, 0.3], [0.3, 0.8]])
    Tm = np.array([[1.0, 0.2], [0.2, 1.1]])
    R = np.array([[0.5, -0.1], [0.2, 0.4]])
    v, A = np.array([0.9, -0.4]), np.array([1.0, -0.6])
    gram = np.block([[Qm, R], [R.T, Tm]])
    risk, _ = model_risk(com, GramState(gram=jnp.asarray(gram),
                                        params={"v": jnp.asarray(v), "A": jnp.asarray(A)}))
    qd, td = np.diag(Qm), np.diag(Tm)
    want = 0.5 * (v @ _he2_he2(qd[:, None], qd[None, :], Qm) @ v
                  + A @ _he3_he3(td[:, None], td[None, :], Tm) @ A)
    np.testing.assert_allclose(float(risk), want, rtol=1e-12)


def test_symmetries_follow_the_parities():
    def flips(student, teacher):
        return SingleIndex(unit=get_unit(student), teacher_unit=get_unit(teacher)).symmetries()

    assert flips("he2", "he2") == (SignFlip(teacher=0), SignFlip(student=0))
    assert flips("he3", "he2") == (SignFlip(teacher=0), SignFlip(student=0, params=("a",)))
    assert flips("relu", "he3") == ()


def test_matched_he2_ode_keeps_the_equator():
    """From the symmetric start (`R = 0`), the exact drift of the matched `He_2` model keeps
    `R = 0` to 1e-12 while `Q` moves; from `R = ±0.01` it escapes, by the mirror path."""
    base = ['model.kind="single_index"', 'model.activation="he2"', "training.t_max=40",
            "training.lr=0.05", "output.n_save=9"]
    sym = run_ode(load_config(None, [*base, 'ode.init="symmetric"'])).arrays()
    assert np.max(np.abs(sym["R"])) < 1e-12
    assert abs(sym["Q"][-1].item() - 1.0) > 0.1                  # not a frozen run
    up = run_ode(load_config(None, [*base, "ode.init={R=[[0.01]]}"])).arrays()
    down = run_ode(load_config(None, [*base, "ode.init={R=[[-0.01]]}"])).arrays()
    assert up["R"][-1].item() > 0.9
    np.testing.assert_allclose(down["R"], -up["R"], rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(down["Q"], up["Q"], rtol=1e-9)


@pytest.mark.parametrize("k", [1, 2])
def test_spherical_drift_is_the_projected_closed_form(k):
    sigma, a, eta, rho = 0.3, 0.8, 0.3, 0.2
    model = SingleIndex(unit=get_unit(f"he{k}"), loss_kind="correlation", noise=sigma,
                        init_second=a, on_sphere=True)
    got = model.named(exact_field(model, StepSizes(lr=eta, lr_bias=eta))(
        0.0, _state(1.0, rho, a)))
    g2 = a**2 * (1 + sigma**2) if k == 1 else 4 * a**2 * (2 + 8 * rho**2 + sigma**2)
    kk = k * math.factorial(k)
    want = eta * a * kk * rho ** (k - 1) * (1 - rho**2) - 0.5 * eta**2 * rho * g2
    np.testing.assert_allclose(float(got["R"][0, 0]), want, rtol=1e-12)
    assert float(got["Q"][0, 0]) == 0.0                      # on the sphere


@pytest.mark.parametrize("space", ["weights", "overlaps"])
def test_spherical_sgd_stays_on_the_sphere(space):
    cfg = load_config(None, ['model.kind="single_index"', 'model.activation="he1"',
                             'model.loss="correlation"', "model.spherical=true",
                             "training.lr=0.5", "training.t_max=1", f"sim.space={space}",
                             "sim.dim=300", "sim.seeds=3", "output.n_save=3"])
    arrays = sims.run_sgd(cfg).arrays()
    tol = 1e-6 if space == "weights" else 1e-12          # float32 weights, float64 chain
    np.testing.assert_allclose(arrays["Q"], 1.0, rtol=0, atol=tol)
    assert np.all(arrays["R"][:, -1] > 0.3)       # k = 1: R ≈ tanh(ηt) from R ≈ 0, no escape wait


EXPONENTS = {"he1(nu1) + he1(nu1)*he1(nu2)": (1, None), "he3(nu1)": (3,),
             "he2(nu1) + he4(nu2)": (2, 4), "sign(nu1)*nu2": (None, None),
             "relu(nu1) - nu2**2/2": (1, 2), "abs(nu1) + 0.5*he3(nu2)": (2, 3)}
"""Per direction: the first Hermite order with a non-zero coefficient once the other fields are
averaged out (`E[He_j] = 0` for j ≥ 1 kills a product's cross terms)."""


def test_formula_values_degrees_and_exponents():
    nu = np.array([0.7, -1.3])
    direct = {"he1(nu1) + he1(nu1)*he1(nu2)": nu[0] + nu[0] * nu[1],
              "he3(nu1)": nu[0]**3 - 3 * nu[0],
              "he2(nu1) + he4(nu2)": nu[0]**2 - 1 + nu[1]**4 - 6 * nu[1]**2 + 3,
              "sign(nu1)*nu2": np.sign(nu[0]) * nu[1],
              "relu(nu1) - nu2**2/2": max(nu[0], 0) - nu[1]**2 / 2,
              "abs(nu1) + 0.5*he3(nu2)": abs(nu[0]) + 0.5 * (nu[1]**3 - 3 * nu[1])}
    degrees = {"he1(nu1) + he1(nu1)*he1(nu2)": 2, "he3(nu1)": 3, "he2(nu1) + he4(nu2)": 4}
    for text, want in EXPONENTS.items():
        f = Formula.parse(text)
        assert f.n_fields == len(want)
        assert f.information_exponents() == want, text
        np.testing.assert_allclose(float(f(jnp.asarray(nu[: f.n_fields]))), direct[text],
                                   rtol=1e-14)
        assert f.polynomial_degree() == degrees.get(text), text


@pytest.mark.parametrize("text", ["__import__('os')", "nu1.real", "he1(nu1, nu2)",
                                  "lambda: 1", "3", "nu0", "x + 1", "nu1**nu2", "[nu1]",
                                  "nu1 if nu1 else nu2", "nu1 @ nu2", "he1(nu1",
                                  "he1 + nu1"])
def test_formula_refuses_everything_else(text):
    with pytest.raises(ConfigError, match=r"^model.teacher = "):
        load_config(None, ['model.kind="multi_index"', f"model.teacher={text!r}"])


def test_multi_index_teacher_directions_come_from_the_formula():
    cfg = load_config(None, ['model.kind="multi_index"', "model.K=3",
                             "model.teacher='he2(nu1) + he1(nu2)*he1(nu3)'",
                             'model.activation="he2"'])
    model = cfg.build_model()
    assert (model.n_students, model.n_teachers) == (3, 3)
    assert model.polynomial_degree() == 2
    nu = jnp.array([0.4, -0.9, 1.7])
    assert float(model.target(model.params0(), nu)) == pytest.approx(0.4**2 - 1 - 0.9 * 1.7)
    # a polynomial student and target on few enough rows: exact Gauss–Hermite expectations
    small = load_config(None, ['model.kind="multi_index"', "model.K=2",
                               'model.activation="he1"'])
    assert small.build_model().polynomial_degree() == 2 and small.ode.expectation == "exact"


def test_default_single_index_learns_at_its_default_step():
    """The single-index kind's own default η (0.1; the other kinds' is 1, where its default
    `he2` student under the square loss diverges): the ODE of the defaults, from a random start,
    learns the target (`|R| → 1`, the risk to round-off)."""
    cfg = load_config(None, ['model.kind="single_index"', "output.n_save=5"])
    assert cfg.training.lr == 0.1 and load_config(None, []).training.lr == 1.0
    ode = run_ode(cfg).arrays()
    print(f"risk {ode['risk']}, R {ode['R'].ravel()}")
    assert ode["risk"][-1] < 1e-8 * ode["risk"][0]
    assert abs(abs(ode["R"].ravel()[-1]) - 1) < 0.1


def test_free_norm_he3_student_shrinks_under_the_square_loss():
    """`E[He_3(λ)²] = 15Q³ − 18Q² + 9Q` grows with `Q`: under the square loss a matched `He_3`
    student with a free norm lowers its risk by shrinking `Q`, not by aligning (`R` falls
    too), from a start with some overlap (the ODE; `docs/index-models.md`)."""
    cfg = load_config(None, ['model.kind="single_index"', 'model.activation="he3"',
                             "training.t_max=20", "training.lr=0.005",
                             "ode.init={R=[[0.05]]}", "output.n_save=6"])
    ode = run_ode(cfg).arrays()
    Q, R = ode["Q"].ravel(), ode["R"].ravel()
    print(f"Q {np.round(Q, 4)}, R {np.round(R, 4)}, risk {np.round(ode['risk'], 3)}")
    assert np.all(np.diff(Q) < 0) and Q[-1] < 0.6
    assert np.all(np.diff(R) < 0) and np.all(np.diff(ode["risk"]) < 0)


def test_sde_and_chain_escape_times_agree():
    """k = 2 from a random start at D = 400: 96 SDE paths against 96 seeds of the overlap
    chain, on the KS distance and the spread (`escape_distributions`; the mean escape time is
    about 2.5, and a run still at the start by `t_max` counts as never escaping): the KS
    verdict is "agree" at this size, and neither statistic disagrees. The SDE's noise is
    factored by `eigh` (a Brownian motion of one component per order parameter, where the
    default `nodes` drives one per noise node, 512 here, at a far larger cost; both are exact
    in law). (Doubling the SDE's diffusion factor, a mutation made and reverted, moves
    its mean to 1.5 and the KS verdict off "agree".)"""
    cfg = load_config(None, ['model.kind="single_index"', 'model.activation="he2"',
                             'model.loss="correlation"', "model.spherical=true",
                             "training.lr=0.2", "training.t_max=10", "output.n_save=101",
                             "sde.dt=0.05", 'sde.noise="eigh"'])
    dist = escape_distributions(cfg, 400, 96, weight_runs=0)
    for pair, v in dist["verdicts"].items():
        print(pair, v["ks"]["phrase"], v["spread"]["phrase"])
    print({k: (round(s["mean"], 2), round(s["sem"], 2)) for k, s in dist["stats"].items()})
    assert dist["verdicts"]["sde_vs_overlaps"]["ks"]["word"] == "agree"
    assert "disagree" not in {v[w]["word"] for v in dist["verdicts"].values()
                              for w in ("ks", "spread")}


@pytest.mark.parametrize("unit,loss,eta", [("he2", "correlation", 0.2), ("square", "square", 0.08),
                                           ("he2", "correlation", 0.7)])
def test_equator_rate_is_the_linear_stability_of_r0(unit, loss, eta):
    """`Λ = ∂(dR/dt)/∂R` at `R = 0` on the sphere, from the model's drift, against the closed
    forms written here: `He_2` under the correlation loss, `4η − 4η²` (`k·k! = 4`,
    `E[G²] = 8`); phase retrieval `ŷ = λ²`, `y = ν²` under the square loss, where
    `E[Gν] = 2(E[λ³ν] − E[λν³]) = 0` and the growth is the projection's `η R E[Gλ]` with
    `E[Gλ] = 2(E[λ⁴] − E[λ²ν²]) = 4`, less `(η²/2) E[G²]` with
    `E[G²] = 4(E[λ⁶] − 2E[λ⁴ν²] + E[λ²ν⁴]) = 4(15 − 6 + 3) = 48`."""
    cfg = load_config(None, ['model.kind="single_index"', f'model.activation="{unit}"',
                             f'model.loss="{loss}"', "model.spherical=true",
                             f"training.lr={eta}"])
    want = 4 * eta - 4 * eta**2 if unit == "he2" else 4 * eta - 24 * eta**2
    assert equator_rate(cfg) == pytest.approx(want, rel=1e-6)


def test_escape_law_fits_and_scaled_settings():
    """`at_dim` scales the step size and the time window from the first D; `power_fit` reads
    the exponent of synthetic escape times `t = 3 D^a` with a D-free log-normal spread."""
    cfg = load_config(None, ['model.kind="single_index"', "training.lr=0.1",
                             "training.t_max=10", "sde.dt=0.05"])
    c = at_dim(cfg, 400, 100, lr_power=0.5, time_power=1.0)
    assert (c.sim.dim, c.training.lr, c.training.t_max, c.sde.dt) == \
        (400, pytest.approx(0.05), pytest.approx(40.0), pytest.approx(0.2))
    rng = np.random.default_rng(0)
    dims = np.array([100, 1000, 10000])
    for a in (0.0, 1.0, 2.0):
        t = 3.0 * dims[:, None] ** a * np.exp(0.3 * rng.standard_normal((3, 200)))
        fit = power_fit(dims, t)
        assert fit["ci"][0] < a < fit["ci"][1] and fit["ci"][1] - fit["ci"][0] < 0.1


def test_direction_alignment_and_several_observables_of_the_same_runs():
    """`DirectionAlignment(m)` is `max_i |R_im|/√(Q_ii T_mm)`, written here by loops on random
    arrays; `escape_laws` with several observables reads them on the same runs: for one student
    and one teacher the model's own observable and the alignment with direction 0 are one
    quantity, so their escape times are equal, path by path."""
    rng = np.random.default_rng(3)
    R, A = rng.normal(size=(5, 7, 3, 2)), rng.normal(size=(5, 7, 3, 3))
    B = rng.normal(size=(5, 7, 2, 2))
    named = {"R": R, "Q": A @ np.swapaxes(A, -1, -2), "T": B @ np.swapaxes(B, -1, -2)}
    for m in range(2):
        want = np.zeros((5, 7))
        for idx in np.ndindex(5, 7):
            Q, T = named["Q"][idx], named["T"][idx]
            want[idx] = max(abs(R[idx][i, m]) / math.sqrt(Q[i, i] * T[m, m]) for i in range(3))
        np.testing.assert_allclose(DirectionAlignment(m)(named), want, rtol=1e-13)
    cfg = load_config(None, ['model.kind="single_index"', 'model.activation="he1"',
                             'model.loss="correlation"', "model.spherical=true",
                             "training.lr=0.2", "training.t_max=6", "sde.dt=0.05",
                             "output.n_save=61"])
    own, first = escape_laws(cfg, [100, 1000], 6,
                             [cfg.build_model().escape_observable, DirectionAlignment(0)])
    assert np.isfinite(own.times).all()
    np.testing.assert_allclose(first.times, own.times, rtol=1e-12)


@pytest.mark.parametrize("overrides", [
    ['model.kind="committee"', "model.K=2", "model.M=1", "training.init_first_std=0.7"],
    ['model.kind="single_index"', "model.spherical=true"],
])
def test_initial_state_without_weights_has_the_law_of_the_weights(overrides):
    """`initial_state` draws the Gram matrix from the Wishart law (a cost free of D) instead of
    from the weights: at D = 12, 4000 draws of each way agree entry by entry (KS), and their
    moments are the closed forms `E[Ω_ij] = δ_ij s_i²`, `Var[Ω_ij] = (1 + δ_ij) s_i² s_j²/D`
    (the non-spherical committee; on the sphere `Q = 1` exactly)."""
    import jax
    from scipy.stats import ks_2samp

    model = load_config(None, overrides).build_model()
    D, n = 12, 4000
    keys = jax.random.split(jax.random.key(3), n)
    fast = np.asarray(jax.vmap(lambda k: model.initial_state(k, D).gram)(keys))
    slow = np.asarray(jax.vmap(lambda k: model.init_weights(k, D).state().gram)(keys))
    P = model.n_rows
    for i in range(P):
        for j in range(i, P):
            a, b = fast[:, i, j], slow[:, i, j]
            if np.ptp(b) < 1e-9:                     # Q on the sphere
                np.testing.assert_allclose(a, b, rtol=1e-12)
                continue
            assert ks_2samp(a, b).pvalue > 1e-3, (i, j)
    if not model.spherical:
        s = np.array([0.7, 0.7, 1.0])
        mean, var = fast.mean(0), fast.var(0)
        np.testing.assert_allclose(mean, np.diag(s**2), atol=5 * np.sqrt(2 / (D * n)))
        want = np.outer(s**2, s**2) * (1 + np.eye(P)) / D
        np.testing.assert_allclose(var, want, rtol=0.1)
