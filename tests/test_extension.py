"""Adding an activation and a prior touches one file each: here both are defined and registered
in this test file alone, and then the config, the ODE (autodiff and generated symbolic right-hand
sides), the SGD simulator, the equations' rendering, the CLI and the figures' styles all know
them, with no other file touched."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Float

import headflow.dynamics as d
from headflow import sims
from headflow.dynamics.activations import (AbstractActivation, SymbolicDefinition, activation_names,
                                           register_activation, unregister_activation)
from headflow.dynamics.ode import run_ode
from headflow.dynamics.priors import (AbstractDiscretePrior, Param, prior_kinds, register_prior,
                                      unregister_prior)
from headflow.dynamics.symbolic import render_activation
from headflow.validation.cli import main


class Softmax2(AbstractActivation):
    """Per-head "off-by-two" softmax, `A_{hℓ} = e^{χ_{hℓ}+b_h} / (2 + Σ_{ℓ'} e^{χ_{hℓ'}+b_h})`."""

    name: ClassVar[str] = "softmax2_test"
    label: ClassVar[str] = "softmax-2"

    def __call__(self, logits: Float[Array, "heads tokens"],
                 bias: Float[Array, " heads"]) -> Float[Array, "heads tokens"]:
        u = logits + bias[:, None]
        top = jax.lax.stop_gradient(jnp.maximum(jnp.max(u, axis=-1, keepdims=True), 0.0))
        e = jnp.exp(u - top)
        return e / (2.0 * jnp.exp(-top) + jnp.sum(e, axis=-1, keepdims=True))

    @classmethod
    def symbolic(cls, s) -> SymbolicDefinition:
        return SymbolicDefinition(
            numerator=lambda h, i: s.exp(s.chi[h, i] + s.b[h]),
            normalizer=lambda h: 2 + s.sum(lambda t: s.exp(s.chi[h, t] + s.b[h]),
                                           over=("token",)),
            latex=r"A_{h\ell} = \frac{e^{\chi_{h\ell} + b_h}}{2 + \sum_{\ell'} "
                  r"e^{\chi_{h\ell'} + b_h}}")


def _probability(value, F):
    del F
    return None if 0.0 <= value < 1.0 else "must lie in [0, 1)"


class Ternary(AbstractDiscretePrior):
    """`θ ∈ {+a e_1, 0, −a e_1}` with probabilities `((1 − p0)/2, p0, (1 − p0)/2)`."""

    kind: ClassVar[str] = "ternary_test"
    params: ClassVar[tuple[Param, ...]] = (
        Param("amplitude", float, 2.0, "a, the spike amplitude"),
        Param("zero", float, 0.5, "p0, the probability of θ = 0", _probability),
    )

    amplitude: float
    zero: float
    F_: int = eqx.field(static=True)

    def __init__(self, amplitude: float, zero: float, F: int):
        self.amplitude, self.zero, self.F_ = float(amplitude), float(zero), int(F)

    @property
    def points(self):
        e1 = jnp.zeros(self.F_).at[0].set(1.0)
        return self.amplitude * jnp.stack([e1, 0.0 * e1, -e1])

    @property
    def weights(self):
        q = 0.5 * (1.0 - self.zero)
        return jnp.array([q, self.zero, q])

    @classmethod
    def from_params(cls, F, values):
        return cls(values["amplitude"], values["zero"], F)


@pytest.fixture
def registered():
    register_activation(Softmax2)
    register_prior(Ternary)
    yield
    unregister_activation(Softmax2.name)
    unregister_prior(Ternary.kind)


SETTINGS = ["model.activation=softmax2_test", "prior.kind=ternary_test", "prior.zero=0.3",
            "model.L=3", "training.t_max=3", "output.n_save=4", "ode.samples=512",
            "sim.dim=200", "sim.seeds=2"]


@pytest.mark.slow
@pytest.mark.fast_compile
def test_new_activation_and_prior_in_one_file_each(registered, tmp_path, capsys):
    assert activation_names()[-1] == "softmax2_test" and prior_kinds()[-1] == "ternary_test"
    cfg = d.load_config(None, SETTINGS)
    assert cfg.prior.zero == 0.3 and cfg.prior.amplitude == 2.0          # schema defaults
    with pytest.raises(d.ConfigError, match=r"prior\.zero = 1\.5: must lie in \[0, 1\)"):
        d.load_config(None, SETTINGS + ["prior.zero=1.5"])
    with pytest.raises(d.ConfigError, match="prior.p is not used by prior.kind = 'ternary_test'"):
        d.load_config(None, SETTINGS + ["prior.p=0.5"])
    model = cfg.build_model()
    assert isinstance(model.activation, Softmax2) and isinstance(model.prior, Ternary)

    # the ODE, with the autodiff right-hand side and with the code generated from the
    # symbolic derivation of the new activation: the same trajectory
    auto = run_ode(cfg)
    symb = run_ode(cfg.replace(**{"ode.rhs": "symbolic"}))
    np.testing.assert_allclose(np.asarray(symb.risk), np.asarray(auto.risk), rtol=1e-10)
    assert float(auto.risk[-1]) < float(auto.risk[0])
    # the SGD simulator
    sgd = sims.run_sgd(cfg)
    assert np.all(np.isfinite(np.asarray(sgd.risk)))
    # the rendered equations
    text = render_activation("softmax2_test")
    assert r"\chi_{h\ell'}} + 2}" in text and "Identities verified" in text
    # the command line (choices and figures come from the registry)
    out = tmp_path / "act"
    assert main(["activations", *sum((["--set", s] for s in SETTINGS if "prior.zero" not in s
                                      and not s.startswith("model.activation")), []),
                 "--activations", "softmax2_test", "--amplitudes", "2",
                 "--t-max", "20", "--t-first", "10", "--risk-samples", "512",
                 "--bayes-samples", "1024", "--out", str(out)]) == 0
    assert (out / "final_risk.png").is_file()
    assert "softmax2_test" in (out / "activations.json").read_text()


def test_unregistered_names_are_one_line_errors():
    with pytest.raises(d.ConfigError, match="model.activation = 'softmax2_test': unknown"):
        d.load_config(None, ["model.activation=softmax2_test"])
    with pytest.raises(d.ConfigError, match="prior.kind = 'ternary_test': unknown"):
        d.load_config(None, ["prior.kind=ternary_test"])
