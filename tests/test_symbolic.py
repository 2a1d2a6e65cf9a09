"""The symbolic derivation (issue 4, `dynamics/symbolic/`): the derived activation Jacobians
against `jax.jacobian`, the generated right-hand side against the autodiff one (`ManifoldField`)
to round-off at the same Gaussian nodes, the two code generators against each other, the derived
equations against the documented ones, the gradient-flow form of the drift within Monte Carlo error
bars,
`docs/equations.md` against the generator, and `headflow ode --set ode.rhs=symbolic` against the
autodiff trajectory.
"""

from __future__ import annotations

import json
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import sympy as sp
from _util import ACTIVATIONS, Z, make_model

import headflow.dynamics as d
from headflow.dynamics import ConfigError, StepSizes
from headflow.dynamics._risk import key_dims, over_theta, risk_integrand, split_key_normals
from headflow.dynamics.activations import get_activation
from headflow.dynamics.expectations import MonteCarlo
from headflow.dynamics.models.attention import ManifoldField
from headflow.dynamics.priors import Discrete, FlippedSpike, Gaussian
from headflow.dynamics.symbolic import (SymbolicField, derive_jacobians, generate, local_field_ode,
                                        manifold_ode)
from headflow.dynamics.symbolic import _algebra as al
from headflow.dynamics.symbolic._activations import symbolic_activation
from headflow.dynamics.symbolic._closed import (bayes_construction, gradient_flow, limits,
                                                paper_variables, risk)
from headflow.dynamics.symbolic._derive import C_, Nv, a_
from headflow.dynamics.symbolic._printer import TensorPrinter, bcast

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-10
FIELDS = ("m", "q", "n", "s", "b", "kv", "kvs", "vks")


def _prior(F: int):
    if F == 1:
        return FlippedSpike(3.0, 0.7, [1.0])
    return Discrete([[1.5, 0.0], [-1.0, 1.0], [0.3, -2.0]], [0.3, 0.5, 0.2])


def _random_state(key, H: int, F: int, rho: float) -> d.Overlaps:
    """A valid state on the manifold: `q − m mᵀ` and `[[s, n], [nᵀ, ρ*]]` positive definite."""
    k1, k2, k3, k4, k5 = jr.split(key, 5)
    m = 0.6 * jr.normal(k1, (H, F))
    R = 0.6 * jr.normal(k2, (H, H + 1))
    n = 0.5 * jr.normal(k3, (H,))
    V = 0.5 * jr.normal(k4, (H, H + 1))
    return d.Overlaps.manifold(m, m @ m.T + R @ R.T, n, V @ V.T + jnp.outer(n, n) / rho,
                               jr.normal(k5, (H,)))


_FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _per_node_both(autodiff, symbolic, ov):
    """Both fields' per-node derivatives, compiled together (one XLA compilation per case,
    with cheap optimization settings: compile time dominates these tests)."""
    arrays, static = eqx.partition((autodiff, symbolic, ov), eqx.is_array)

    def fn(arrs):
        a, s, o = eqx.combine(arrs, static)
        return a.per_node(o), s.per_node(o)

    return jax.jit(fn).lower(arrays).compile(_FAST_COMPILE)(arrays)


def _max_diff(a: d.Overlaps, b: d.Overlaps) -> dict:
    return {f: float(jnp.max(jnp.abs(getattr(a, f) - getattr(b, f)))) for f in FIELDS}


# -- activation Jacobians ------------------------------------------------------------------------

def _eval_index(expr, axes, sizes, arrays: dict):
    """Evaluate an index expression with the code printer (sizes `(H, L, F)`)."""
    Hn, Ln, Fn = sizes
    tp = TensorPrinter({"head": Hn, "token": Ln, "feature": Fn},
                       {base: f"X{i}" for i, base in enumerate(arrays)},
                       {})
    code = tp.statement(expr.xreplace({al.H: Hn, al.L: Ln, al.F: Fn}), axes)
    ns = {"jnp": jnp, "jax": jax, "bcast": bcast}
    ns.update({f"X{i}": v for i, v in enumerate(arrays.values())})
    return eval(code, ns)  # noqa: S307 - our own generated code


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("H,L", [(2, 4), (3, 2)])
def test_activation_jacobians_equal_autodiff(act, H, L):
    """`∂A/∂χ`, `∂A/∂b` derived from the sympy definition (and rewritten in A) equal
    `jax.jacobian` of the numeric activation, at logits spread over several units."""
    k1, k2 = jr.split(jr.key(H * 10 + L))
    chi = 2.0 * jr.normal(k1, (H, L))
    b = jr.normal(k2, (H,))
    fn = get_activation(act)
    A = fn(chi, b)
    j_chi, j_b = jax.jit(jax.jacobian(fn, argnums=(0, 1)))(chi, b)  # (H,L,H,L), (H,L,H)
    sym_chi, sym_b = derive_jacobians(act)
    got_chi = _eval_index(sym_chi, (al.h, al.ell, al.k, al.p), (H, L, 1), {al.A: A})
    got_b = _eval_index(sym_b, (al.h, al.ell, al.k), (H, L, 1), {al.A: A})
    np.testing.assert_allclose(got_chi, j_chi, atol=1e-13, rtol=0)
    np.testing.assert_allclose(got_b, j_b, atol=1e-13, rtol=0)
    assert np.max(np.abs(j_chi)) > 1e-2   # not a trivial comparison


def test_jacobian_entries_by_plain_substitution():
    """The same check entry by entry through sympy's own substitution (independent of the
    code printer), for Bayes-softmax at H = 2, L = 3."""
    H, L = 2, 3
    chi = jnp.array([[0.3, -1.2, 0.8], [1.5, 0.1, -0.4]])
    b = jnp.array([0.2, -0.7])
    A = np.asarray(get_activation("bayes_softmax")(chi, b))
    j_auto = np.asarray(jax.jacobian(get_activation("bayes_softmax"))(chi, b))
    jc, _ = derive_jacobians("bayes_softmax")
    vals = {al.A[i + 1, j + 1]: A[i, j] for i in range(H) for j in range(L)}
    for hh, ll, kk, pp in [(1, 1, 1, 1), (1, 2, 2, 3), (2, 3, 2, 3), (2, 1, 1, 2)]:
        e = al.instantiate(jc, (H, L, 1), {al.h: hh, al.ell: ll, al.k: kk, al.p: pp})
        assert abs(float(e.xreplace(vals)) - j_auto[hh - 1, ll - 1, kk - 1, pp - 1]) < 1e-14


def test_a_new_case_reads_the_stored_derivation(tmp_path, monkeypatch):
    """The source cache keeps each activation's derivation beside the source of each case: a
    process that generates a case it has not generated before (other sizes) reads the
    derivation back instead of deriving again, and generates the source a fresh derivation
    gives; a corrupt stored derivation is derived again."""
    from headflow.dynamics.symbolic import _codegen

    monkeypatch.setattr(_codegen, "source_cache", lambda: tmp_path)
    manifold = _codegen.manifold_ode("softmax")          # this process's own derivation
    _codegen._SOURCE_CACHE.store_manifold("softmax", manifold)
    (stored,) = tmp_path.glob("softmax-manifold-*.pickle")

    def refuse(activation):
        raise AssertionError(f"{activation} derived again")

    # a fresh process: nothing in memory, the derivation only on disk
    monkeypatch.setattr(_codegen, "manifold_ode", refuse)
    monkeypatch.setattr(_codegen, "_derivation", _codegen._derivation.__wrapped__)
    sources = _codegen._einsum_source("softmax", (2, 3, 1), True,
                                      _codegen._derivation("softmax"))
    assert sources == _codegen._einsum_source("softmax", (2, 3, 1), True, manifold)
    stored.write_bytes(b"not a pickle")
    with pytest.raises(AssertionError, match="softmax derived again"):
        _codegen._derivation("softmax")


def test_unknown_activation_is_one_line_error():
    with pytest.raises(ConfigError, match="no symbolic definition"):
        symbolic_activation("sparsemax")


# -- generated right-hand side versus autodiff -------------------------------------------------

@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("H", [1, 2, 3])
@pytest.mark.parametrize("F", [1, 2])
def test_generated_rhs_equals_autodiff(act, H, F):
    """Same nodes, same state: the per-node derivative of the generated field equals
    `ManifoldField`'s to 1e-10, with the η² terms, biases, weight decay, batch and label noise
    all switched on."""
    model = make_model(act, L=3, H=H, prior=_prior(F), noise=0.3, rho=1.2)
    hp = StepSizes(lr=0.7, lr_bias=1.3, weight_decay=0.05, batch=3)
    backend = MonteCarlo(samples=24, seed=H + 10 * F)
    ov = _random_state(jr.key(100 * H + F), H, F, model.rho)
    auto, sym = _per_node_both(ManifoldField.build(model, hp, backend, sgd_noise=True),
                               SymbolicField.build(model, hp, backend, sgd_noise=True), ov)
    diff = _max_diff(auto, sym)
    assert max(diff.values()) < TOL, diff
    scale = max(float(jnp.max(jnp.abs(getattr(auto, f)))) for f in ("m", "q", "n", "s"))
    assert scale > 1e-2


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_generated_rhs_variants(act):
    """Gradient flow (no η² terms), frozen values, a continuous (Gaussian) prior and zero
    biases; and, for Bayes-softmax, the rank-deficient construction state (`r = 0`)."""
    H, F = 2, 2
    model = make_model(act, L=4, H=H, prior=Gaussian([0.8, -0.4], [2.0, 0.5]), noise=0.0,
                       rho=0.9, train_values=False)
    hp = StepSizes(lr=1.1, lr_bias=0.4, weight_decay=0.0, batch=1)
    backend = MonteCarlo(samples=16, seed=3)
    ov = _random_state(jr.key(7), H, F, model.rho)
    ov = eqx.tree_at(lambda o: o.b, ov, jnp.zeros(H))
    auto, sym = _per_node_both(ManifoldField.build(model, hp, backend, sgd_noise=False),
                               SymbolicField.build(model, hp, backend, sgd_noise=False), ov)
    diff = _max_diff(auto, sym)
    assert max(diff.values()) < TOL, diff
    assert float(jnp.max(jnp.abs(sym.n))) == 0.0 and float(jnp.max(jnp.abs(sym.s))) == 0.0
    if act == "bayes_softmax":
        cmodel = make_model(act, L=3, H=2, prior=_prior(1), rho=1.0)
        cov, _ = d.bayes_construction(cmodel)
        hp2 = StepSizes(lr=0.5, lr_bias=0.5)
        auto, sym = _per_node_both(ManifoldField.build(cmodel, hp2, backend),
                                   SymbolicField.build(cmodel, hp2, backend), cov)
        diff = _max_diff(auto, sym)
        assert max(diff.values()) < TOL, diff


@pytest.mark.parametrize("act,sizes", [("bayes_softmax", (2, 2, 1)), ("softmax1", (2, 3, 2))])
def test_two_code_generators_agree(act, sizes):
    """The vectorized (einsum) code and the entry-by-entry `sympy.lambdify` code, generated
    independently from the same derivation, agree on random inputs."""
    H, L, F = sizes
    ein, sca = generate(act, H, L, F, True, "einsum"), generate(act, H, L, F, True, "scalar")
    keys = jr.split(jr.key(5), 8)
    chi, chis = 2 * jr.normal(keys[0], (H, L)), jr.normal(keys[1], (F, L))
    b, n = jr.normal(keys[2], (H,)), jr.normal(keys[3], (H,))
    V = jr.normal(keys[4], (H, H))
    s = V @ V.T
    args = (chi, chis, b, n, s, 1.3, 0.4)
    e1, e2 = ein.integrands(*args), sca.integrands(*args)
    for c in e1:
        np.testing.assert_allclose(e2[c], e1[c], atol=1e-12, rtol=1e-12, err_msg=c)
    ov = _random_state(keys[5], H, F, 1.3)
    hyper = (0.7, 1.1, 0.05, 2, 1.3)
    ex = [e1[c] for c in ("a", "C", "Tm", "Tq", "gb", "Nk", "Nv")]
    r1 = ein.rhs(*ex, ov.m, ov.q, ov.n, ov.s, ov.b, *hyper)
    r2 = sca.rhs(*ex, ov.m, ov.q, ov.n, ov.s, ov.b, *hyper)
    for f in r1:
        np.testing.assert_allclose(r2[f], r1[f], atol=1e-12, rtol=1e-12, err_msg=f)


def test_generated_attention_is_stable():
    """Logits of ±800 (e^800 overflows float64): the generated attention stays finite and
    equals the numeric activation."""
    chi = jnp.array([[800.0, 799.0, -5.0], [-800.0, -801.0, -799.5]])
    b = jnp.array([0.5, 1.0])
    for act in ACTIVATIONS:
        gen = generate(act, 2, 3, 1, False)
        out = gen.integrands(chi, jnp.zeros((1, 3)), b, jnp.ones(2), jnp.eye(2), 1.0, 0.0)
        A = get_activation(act)(chi, b)
        np.testing.assert_allclose(out["a"], A[:, 0], atol=1e-14)
        np.testing.assert_allclose(out["C"], A @ A.T, atol=1e-14)


# -- the derivation against the spec's equations ------------------------------------------------

def test_local_field_ode_is_spec_section_6():
    """The SGD step pushed through the bilinear algebra and the high-dimensional limit gives
    the generic ODE of `docs/ode.md#derivation-of-the-odes` (typed here from the docs)."""
    G, lam, Om = al.G, al.lam_f, al.Omega
    i, j, js, ell = al.i_, al.j_, al.js, al.ell
    E, Sl = al.Expect, (lambda x: sp.Sum(x, (ell, 1, al.L)))
    eta, wd, B = al.eta, al.wd, al.B
    spec_ss = (-eta * E(Sl(G[i, ell] * lam[j, ell])) - eta * E(Sl(G[j, ell] * lam[i, ell]))
               + eta**2 / B * E(Sl(G[i, ell] * G[j, ell])) - 2 * eta * wd * Om[i, j])
    spec_st = -eta * E(Sl(G[i, ell] * lam[js, ell])) - eta * wd * Om[i, js]
    spec_b = -al.eta_b * E(al.Gb[al.h])
    eqs = local_field_ode()
    assert al.tidy(eqs["ss"].rhs) == al.tidy(spec_ss)
    assert al.tidy(eqs["st"].rhs) == al.tidy(spec_st)
    assert al.tidy(eqs["bias"].rhs) == al.tidy(spec_b)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_value_side_and_invariance_are_spec(act):
    """Spec §6's explicit value side, `dn/dt = η(ρ* a − C n) − ηλn` and
    `ds/dt = η(a nᵀ + n aᵀ − C s − s C) + (η²/B) N^v − 2ηλ s`, and zero drift of the cross
    overlaps (the invariant manifold), for every activation."""
    M = manifold_ode(act)
    h, k, kp = al.h, al.k, al.index("c")
    eta, wd, B, n, s = al.eta, al.wd, al.B, al.n, al.s
    def Sk(x):
        return sp.Sum(x, (kp, 1, al.H))

    spec_n = eta * (al.rho * a_[h] - Sk(C_[h, kp] * n[kp])) - eta * wd * n[h]
    spec_s = (eta * (a_[h] * n[k] + n[h] * a_[k] - Sk(C_[h, kp] * s[kp, k])
                     - Sk(s[h, kp] * C_[kp, k])) + eta**2 / B * Nv[h, k] - 2 * eta * wd * s[h, k])
    assert al.vanishes(M.rhs["n"][1] - spec_n)
    assert al.vanishes(M.rhs["s"][1] - spec_s)
    for cross in ("kv", "kvs", "vks"):
        assert M.rhs[cross][1] == 0
    assert len(M.checks) == 5   # identities asserted during the derivation


def test_closed_forms():
    """Risk (`docs/model.md#population-risk`), its ŷ ≡ 0 limit, the Bayes limits
    (`docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction`), the construction."""
    h, k = al.h, al.k
    spec_R = (al.Delta**2 + al.rho - 2 * sp.Sum(al.n[h] * a_[h], (h, 1, al.H))
              + sp.Sum(al.s[h, k] * C_[h, k], (h, 1, al.H), (k, 1, al.H)))
    assert al.vanishes(risk().rhs - spec_R)
    lim = limits()
    assert sp.simplify(lim["no values"].rhs - (al.Delta**2 + al.rho)) == 0
    assert sp.simplify(lim["heads off"].rhs - (al.Delta**2 + al.rho)) == 0
    assert sp.simplify(lim["bayes theta=0"].rhs - (al.Delta**2 + al.rho * (1 - 1 / al.L))) == 0
    assert lim["strong signal"].rhs == 0
    assert sp.simplify(lim["bayes strong"].rhs - al.Delta**2) == 0
    assert len(bayes_construction()["verified"]) == 3
    pv = paper_variables()
    assert not pv["Tq"].rhs.has(al.Expect)
    assert set(gradient_flow()) >= {"m", "q", "b", "dR/dm"}


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_gradient_flow_form_within_error_bars(act):
    """The η¹ terms of the key equations are population gradient flow of R/2 (the derivatives
    of a and C, docs/equations.md §6), with the pathwise derivative of the risk integrand at
    fixed normals. For m and b the two agree node by node (moving k_h along k*_f, or b_h,
    leaves `r` unchanged, so the pathwise derivative is `Σ_ℓ Ĝ_ℓ χ*_ℓ`); for q they are two
    unbiased estimators of the same expectation (Gaussian integration by parts), equal within
    the Monte Carlo error."""
    H, L, F = 2, 3, 1
    model = make_model(act, L=L, H=H, prior=_prior(F), noise=0.2, rho=1.1)
    ov = _random_state(jr.key(11), H, F, model.rho)
    gen = generate(act, H, L, F, False)
    nodes = MonteCarlo(samples=1 << 13, seed=4).nodes(key_dims(model))

    def per_node(x):
        def risk_at(m, q, b):
            o = d.Overlaps.manifold(m, q, ov.n, ov.s, b)
            law = d.FieldLaw.from_overlaps(o, model.rho, manifold=True)
            return risk_integrand(model, law, b, x)

        gm, gq, gb = jax.grad(risk_at, argnums=(0, 1, 2))(ov.m, ov.q, ov.b)
        sq = gq + gq.T
        pred_tm = 0.5 * (gm + sq @ ov.m)
        pred_tq = 0.5 * (gm @ ov.m.T + ov.m @ gm.T + sq @ ov.q + ov.q @ sq)
        law = d.FieldLaw.from_overlaps(ov, model.rho, manifold=True)
        tn, g_star, g_perp = split_key_normals(model, x)

        def at(theta):
            chi_star, chi = law.key_fields(theta, g_star, g_perp)
            return gen.integrands(chi, chi_star, ov.b, ov.n, ov.s, model.rho, model.noise)

        E = over_theta(model, tn, g_star, at)
        return {"m": pred_tm - E["Tm"], "q": pred_tq - (E["Tq"] + E["Tq"].T),
                "b": 0.5 * gb - E["gb"], "scale": jnp.abs(E["Tm"])}

    out = jax.jit(jax.vmap(per_node))(nodes.x)
    for key in ("m", "b"):
        assert float(np.max(np.abs(out[key]))) < 1e-12, key
    x = np.asarray(out["q"])
    mean, se = x.mean(0), x.std(0, ddof=1) / np.sqrt(len(x))
    assert np.all(np.abs(mean) < Z * se), (mean, se)
    assert float(np.max(se)) < 1e-2 and float(np.max(np.abs(x))) > 1e-3   # has teeth
    assert float(np.mean(out["scale"])) > 1e-3


# -- docs/equations.md and the regeneration command --------------------------------------------

def test_equations_md_is_up_to_date(tmp_path):
    from headflow.dynamics.symbolic.__main__ import main
    from headflow.dynamics.symbolic._render import render

    text = render()
    assert (ROOT / "docs" / "equations.md").read_text(encoding="utf-8") == text, (
        "docs/equations.md is stale: run `python -m headflow.dynamics.symbolic`")
    out = tmp_path / "eq.md"
    assert main(["--out", str(out)]) == 0 and out.read_text(encoding="utf-8") == text
    assert main(["--check", "--out", str(out)]) == 0
    out.write_text(text + "edited\n", encoding="utf-8")
    assert main(["--check", "--out", str(out)]) == 1


# -- the command line -----------------------------------------------------------------------------

_CONFIG = """
[model]
L = 3
H = 2
activation = "{act}"
noise = 0.2
[prior]
kind = "flipped_spike"
[training]
lr = 0.8
lr_bias = 1.2
weight_decay = 0.02
batch = 2
t_max = 4.0
[ode]
samples = 512
init = "random"
[sim]
dim = 200
[output]
n_save = 9
"""


@pytest.mark.slow
@pytest.mark.parametrize("act", ["softmax1"])
def test_cli_symbolic_trajectory_equals_autodiff(tmp_path, act, capsys):
    """`headflow ode CONFIG --set ode.rhs=symbolic` reproduces the autodiff trajectory."""
    from headflow.validation.cli import main

    cfg = tmp_path / "cfg.toml"
    cfg.write_text(_CONFIG.format(act=act), encoding="utf-8")
    runs = {}
    for rhs in ("autodiff", "symbolic"):
        out = tmp_path / rhs
        assert main(["ode", str(cfg), "--set", f"ode.rhs={rhs}", "--out", str(out),
                     "--json"]) == 0
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert Path(summary["out"]) == out
        runs[rhs] = np.load(out / "ode.npz")
    a, s = runs["autodiff"], runs["symbolic"]
    for key in ("risk", "m", "q", "n", "s", "b"):
        np.testing.assert_allclose(s[key], a[key], atol=1e-9, rtol=0, err_msg=key)
    assert np.max(np.abs(a["m"][-1] - a["m"][0])) > 1e-2   # it moved


def test_cli_symbolic_needs_the_manifold_form(tmp_path, capsys):
    from headflow.validation.cli import main

    out = tmp_path / "run"
    code = main(["ode", "--set", "ode.rhs=symbolic", "--set", "ode.form=full",
                 "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("headflow: error:")
    assert "manifold" in err[0] and not out.exists()
