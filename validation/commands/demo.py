"""`headflow demo`: the main job, theory versus SGD on the default experiment."""

from __future__ import annotations

import math
from importlib import resources

from .compare import verdict_lines
from ._common import add_out_args, add_set_arg, checked, out_dir, replace_out, write_comparison


EXAMPLE = "headflow demo --set sim.seeds=4 --set sde.paths=8"
"""Shown at the end of `--help`."""


def register(sub) -> None:
    p = sub.add_parser("demo", help="the main job: theory vs SGD on the default experiment",
                       description="The SDE ensemble of the order parameters at the run's D "
                       "against online SGD seeds on the default experiment "
                       "(validation/configs/demo.toml), compared as distributions (mean, "
                       "spread, escape times) with verdicts in words: compare.png, report.json "
                       "and summary.md, in two to three minutes on a laptop CPU.")
    add_set_arg(p)
    add_out_args(p)
    p.set_defaults(func=run)


def demo_config_text() -> str:
    return resources.files("validation").joinpath("configs/demo.toml").read_text()


def bayes_summary(cfg, samples: int) -> dict:
    """[`validation.experiments.bayes.bayes_summary`][], imported on first use."""
    from ..experiments.bayes import bayes_summary as summary

    return summary(cfg, samples)


def run(args) -> dict:
    from dynamics import Config, ConfigError
    from dynamics.config import parse_value

    from .._json import write as write_json
    from .._rundir import run_dir

    kinds = [x for x in args.set if x.partition("=")[0].strip() == "model.kind"]
    if kinds and parse_value(kinds[-1].partition("=")[2].strip()) != "attention":
        raise ConfigError("demo runs the attention model of validation/configs/demo.toml; for "
                          "another model.kind use headflow compare with its config "
                          "(docs/models.md)")
    cfg = Config.from_toml(demo_config_text(), args.set)
    out = args.out if args.out is not None else out_dir(args, "demo", cfg)
    if args.check:
        return checked(args, out)
    with run_dir(out, replace=replace_out(args), command="demo", config_toml=cfg.to_toml(),
                 meta={"theory": "sde"}) as rd:
        report = write_comparison(rd, cfg, theory="sde")
        with rd.timed("bayes"):
            bayes = bayes_summary(cfg, 1 << 17)
        summary = {**report, "bayes": bayes}
        write_json(rd.path("summary.json"), summary)
        rd.path("summary.md").write_text(_markdown(cfg, report, bayes))
    print(_markdown(cfg, report, bayes))
    print(f"results in {out}/ (compare.png, report.json, summary.md)")
    return {**report, "bayes_risk": bayes["bayes_risk"], "out": str(out)}


def _fmt(x: float | None) -> str:
    return "never" if x is None or not math.isfinite(x) else f"{x:.1f}"


def _pm(final: dict) -> str:
    """`std ± its standard error` of one ensemble's final risk (n/a for a single run)."""
    std, se = final["std"], final["std_se"]
    if std is None or not math.isfinite(std):
        return "n/a"
    return f"{std:.4f} ± {se:.4f}"


def _verdict_word(v: bool | None) -> str:
    return "not assessed" if v is None else ("agree" if v else "**disagree**")


def _markdown(cfg, rep: dict, bayes: dict) -> str:
    esc, v, fin, sde = rep["escape"], rep["verdicts"], rep["final"], rep["sde"]
    sgd_esc = sorted(e for e in esc["sgd"] if e is not None)
    qs, qt = esc["sgd_quantiles"], esc["theory_quantiles"]
    z = v["mean"]["z_max"]
    lines = [
        "# headflow demo: SDE theory vs online SGD",
        "",
        f"- model: {cfg.model.H} {cfg.model.activation} heads, L = {cfg.model.L}, prior "
        f"{cfg.prior.kind} (amplitude {cfg.prior.amplitude}), η = {cfg.training.lr}",
        f"- SGD: D = {rep['dim']}, {rep['seeds']} seeds; theory: {rep['paths']} paths of the "
        f"overlaps' SDE at the same D, each from its own random start ({sde['solver']}, "
        f"dt = {sde['dt']:g}, {sde['samples_drift']} drift and {sde['samples_noise']} noise "
        f"nodes; {sde['paths_invalid']} paths left the PSD domain)",
        f"- overall: **theory and simulation {'agree' if v['all'] else 'disagree'}** "
        "(every verdict below)",
        "",
        "| what | SDE | SGD | criterion | verdict |",
        "|---|---|---|---|---|",
        f"| mean risk over time | final {fin['risk_theory']:.4f} ± {fin['risk_theory_sem']:.4f} "
        f"| final {fin['risk_sgd']:.4f} ± {fin['risk_sgd_sem']:.4f} | largest difference "
        + (f"{z:.2f}" if z is not None else "n/a")
        + f" combined s.e. (t = {v['mean']['t_z_max']:.3g}), ≤ {v['mean']['threshold']:g} "
        f"at every saved time | {_verdict_word(v['mean']['agree'])} |",
        f"| std of the risk | final {_pm(rep['ensemble']['risk']['final_theory'])} | "
        f"final {_pm(rep['ensemble']['risk']['final_sgd'])} | SDE/SGD averaged over "
        f"t > 0 = {v['std']['ratio_mean']:.3f}, within {100 * v['std']['tolerance']:.0f}% of 1 "
        f"| {_verdict_word(v['std']['agree'])} |",
        f"| escape time 10/50/90% | {_fmt(qt['0.1'])} / {_fmt(qt['0.5'])} / {_fmt(qt['0.9'])} "
        f"({esc['theory_escaped']}/{rep['paths']} escaped) | {_fmt(qs['0.1'])} / "
        f"{_fmt(qs['0.5'])} / {_fmt(qs['0.9'])} ({esc['sgd_escaped']}/{rep['seeds']}) | "
        f"two-sample KS p = {v['escape']['ks_p']:.3g} ≥ {v['escape']['level']:g} | "
        f"{_verdict_word(v['escape']['agree'])} |",
        "",
        "In words: " + " ".join(line.rstrip(".") + "." for line in verdict_lines(rep)[:3]),
        "",
        f"- SGD escape times: {', '.join(f'{e:.1f}' for e in sgd_esc) or 'none'} "
        "(a run that never escapes counts as +inf in the quantiles and the KS test)",
        f"- risk: sup |SDE mean − SGD mean| = {rep['risk_sup_abs']:.4f} "
        f"({100 * rep['risk_sup_rel']:.1f}% relative) over t ≤ {rep['t_max']:g}; before the "
        f"first escape (t ≤ {rep['pre_escape']['t_end']:.1f}): "
        f"{100 * rep['pre_escape']['risk_sup_rel']:.2f}%",
        f"- Bayes-optimal risk {bayes['bayes_risk']:.4f}",
        "- figure: compare.png (SDE fan: median, 50% and 90% bands; SGD seeds as thin lines; "
        "escape-time distribution functions of both)",
        "",
    ]
    return "\n".join(lines)
