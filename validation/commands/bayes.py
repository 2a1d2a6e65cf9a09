"""`headflow bayes CONFIG`: Bayes-optimal risk and the Bayes-softmax construction's risk."""

from __future__ import annotations

from ._common import add_config_args, checked, config_from_args, out_dir, replace_out, sample_count
from ._common import require_attention


EXAMPLE = "headflow bayes validation/configs/demo.toml --samples 65536"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("bayes", help="Bayes-optimal risk and the Bayes-softmax construction",
                       description="R_Bayes of the configured prior with its Monte "
                       "Carlo error, and, for discrete priors, the risk of the Bayes-softmax "
                       "construction (one head per support point) and of the same weights "
                       "with per-head softmax.")
    add_config_args(p)
    p.add_argument("--samples", type=sample_count, default=1 << 18,
                   help="Monte Carlo samples (default 262144)")
    p.set_defaults(func=run)


def run(args) -> dict:
    from .._json import write as write_json
    from .._rundir import run_dir
    from ..experiments.bayes import bayes_summary

    cfg = config_from_args(args)
    require_attention(cfg, "bayes",
                      "it computes the Bayes-optimal risk of the attention model's prior")
    out = out_dir(args, "bayes", cfg, extra=str(args.samples))
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="bayes", config_toml=cfg.to_toml(),
                 meta={"samples": args.samples}) as rd:
        with rd.timed("bayes"):
            summary = bayes_summary(cfg, args.samples)
        write_json(rd.path("bayes.json"), summary)
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
