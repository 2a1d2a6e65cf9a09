"""`headflow bayes CONFIG`: Bayes-optimal risk and the Bayes-softmax construction's risk."""

from __future__ import annotations

import dataclasses
import json

from dynamics import bayes_construction, bayes_risk, population_risk
from dynamics.activations import BayesSoftmax, Softmax
from dynamics.expectations import get_expectation
from dynamics.priors import AbstractDiscretePrior

from .._rundir import run_dir
from ._common import add_config_args, config_from_args, out_dir, positive_int


def register(sub) -> None:
    p = sub.add_parser("bayes", help="Bayes-optimal risk and the Bayes-softmax construction",
                       description="R_Bayes of the configured prior (spec §7) with its Monte "
                       "Carlo error, and, for discrete priors, the risk of the Bayes-softmax "
                       "construction (one head per support point) and of the same weights "
                       "with per-head softmax.")
    add_config_args(p)
    p.add_argument("--samples", type=positive_int, default=1 << 18,
                   help="Monte Carlo samples (default 262144)")
    p.set_defaults(func=run)


def compute(cfg, samples: int) -> dict:
    """The `bayes` summary for a configuration."""
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


def run(args) -> dict:
    cfg = config_from_args(args)
    out = out_dir(args, "bayes", cfg, extra=str(args.samples))
    with run_dir(out, command="bayes", config_toml=cfg.to_toml(),
                 meta={"samples": args.samples}) as rd:
        with rd.timed("bayes"):
            summary = compute(cfg, args.samples)
        rd.path("bayes.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"R_Bayes = {summary['bayes_risk']:.6f} ± {summary['bayes_risk_err']:.1e}")
    if summary["construction_risk"] is not None:
        print(f"Bayes-softmax construction ({summary['construction_heads']} heads): "
              f"R = {summary['construction_risk']:.6f} ± {summary['construction_risk_err']:.1e}")
        print(f"same weights, per-head softmax:            "
              f"R = {summary['construction_softmax_risk']:.6f} ± "
              f"{summary['construction_softmax_risk_err']:.1e}")
    else:
        print("Bayes-softmax construction: needs a discrete prior (not available)")
    return {**summary, "out": str(out)}
