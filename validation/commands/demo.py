"""`headflow demo`: the main job, theory versus SGD on the default experiment."""

from __future__ import annotations

from importlib import resources


from dynamics import Config

from .._json import write as write_json
from .._rundir import run_dir
from ..experiments.bayes import bayes_summary
from ._common import add_out_args, add_set_arg, checked, out_dir, replace_out, write_comparison


EXAMPLE = "headflow demo --set sim.seeds=4"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("demo", help="the main job: theory vs SGD on the default experiment",
                       description="ODE versus online SGD on the default experiment "
                       "(validation/configs/demo.toml): figures, report.json and summary.md, "
                       "in one to two minutes on a laptop CPU.")
    add_set_arg(p)
    add_out_args(p)
    p.set_defaults(func=run)


def demo_config_text() -> str:
    return resources.files("validation").joinpath("configs/demo.toml").read_text()


def run(args) -> dict:
    cfg = Config.from_toml(demo_config_text(), args.set)
    out = args.out if args.out is not None else out_dir(args, "demo", cfg)
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="demo", config_toml=cfg.to_toml()) as rd:
        report = write_comparison(rd, cfg)
        with rd.timed("bayes"):
            bayes = bayes_summary(cfg, 1 << 17)
        summary = {**report, "bayes": bayes}
        write_json(rd.path("summary.json"), summary)
        rd.path("summary.md").write_text(_markdown(cfg, report, bayes))
    print(_markdown(cfg, report, bayes))
    print(f"results in {out}/ (compare.png, report.json, summary.md)")
    return {**report, "bayes_risk": bayes["bayes_risk"], "out": str(out)}


def _markdown(cfg, rep: dict, bayes: dict) -> str:
    esc = rep["escape"]
    sgd_esc = [e for e in esc["sgd"] if e is not None]
    lines = [
        "# headflow demo: ODE theory vs online SGD",
        "",
        f"- model: {cfg.model.H} {cfg.model.activation} heads, L = {cfg.model.L}, prior "
        f"{cfg.prior.kind} (amplitude {cfg.prior.amplitude}), η = {cfg.training.lr}",
        f"- SGD: D = {rep['dim']}, {rep['seeds']} seeds; ODE: {rep['ode_form']} form, "
        f"{cfg.ode.samples} {cfg.ode.expectation} nodes, started from the seed-mean initial "
        "overlaps",
        f"- risk: sup |ODE − SGD mean| = {rep['risk_sup_abs']:.4f} "
        f"({100 * rep['risk_sup_rel']:.1f}% relative) over t ≤ {rep['t_max']:g}; "
        f"before escape (t ≤ {rep['pre_escape']['t_end']:.1f}): "
        f"{100 * rep['pre_escape']['risk_sup_rel']:.2f}%",
        f"- final risk: ODE {rep['final']['risk_ode']:.4f}, SGD {rep['final']['risk_sgd']:.4f} "
        f"± {rep['final']['risk_sgd_sem']:.4f}; Bayes-optimal {bayes['bayes_risk']:.4f}",
        f"- specialization escape: SGD seeds {', '.join(f'{e:.1f}' for e in sgd_esc) or 'none'}; "
        f"ODE {esc['ode']:.1f}" if esc["ode"] is not None else
        f"- specialization escape: SGD seeds {', '.join(f'{e:.1f}' for e in sgd_esc) or 'none'}; "
        "ODE none",
        "",
    ]
    return "\n".join(lines)
