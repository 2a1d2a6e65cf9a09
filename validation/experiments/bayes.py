"""Bayes-optimal risk and the Bayes-softmax construction of a configuration
(`docs/model.md#bayes-optimal-risk-and-the-bayes-softmax-construction`)."""

from __future__ import annotations

import dataclasses

from headflow.dynamics import Config, bayes_construction, bayes_risk, population_risk
from headflow.dynamics.activations import BayesSoftmax, Softmax
from headflow.dynamics.expectations import get_expectation
from headflow.dynamics.priors import AbstractDiscretePrior


def bayes_summary(cfg: Config, samples: int) -> dict:
    """`R_Bayes` with its Monte Carlo error (`samples` nodes), and for discrete priors the risk
    of the Bayes-softmax construction (one head per support point) and of the same weights
    with per-head softmax."""
    model = cfg.build_model()
    backend = get_expectation("mc", samples, seed=cfg.ode.seed)
    r, r_err = bayes_risk(model, backend)
    out = {"bayes_risk": float(r), "bayes_risk_err": float(r_err), "construction_risk": None,
           "construction_risk_err": None, "construction_heads": None,
           "construction_softmax_risk": None, "construction_softmax_risk_err": None}
    if isinstance(model.prior, AbstractDiscretePrior):
        ov, theta = bayes_construction(model)
        for act, key in ((BayesSoftmax(), "construction"), (Softmax(), "construction_softmax")):
            m = dataclasses.replace(model, H=theta.shape[0], activation=act)
            c, c_err = population_risk(m, ov, backend, manifold=True)
            out[f"{key}_risk"], out[f"{key}_risk_err"] = float(c), float(c_err)
        out["construction_heads"] = int(theta.shape[0])
    return out
