"""`headflow schedule` and `headflow fit`: their files, JSON summaries and bad inputs (one
line, exit 2, nothing left behind); `fit` recovers the parameters of a curve the ODE made."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headflow.dynamics import load_config
from headflow.dynamics.ode import learning_curve
from headflow.validation.cli import main

from _util import one_line_error as _one_line_error  # noqa: E402
from _util import strict_json as _strict  # noqa: E402

TINY = ["--set", "model.L=2", "--set", "ode.samples=256", "--set", "output.n_save=11",
        "--set", "sim.risk_samples=256", "--set", "sim.space=overlaps"]
# the same sizes on the committee, whose programs compile in a fraction of the attention
# model's time: the command's files and summary do not depend on the model
COMMITTEE_TINY = ["--set", 'model.kind="committee"', *TINY[2:]]


@pytest.mark.slow
def test_schedule_writes_results(tmp_path, capsys):
    out = tmp_path / "a" / "run"
    assert main(["schedule", *COMMITTEE_TINY, "--budget", "4", "--knots", "3", "--steps", "3",
                 "--dim", "200", "--seeds", "2", "--design-samples", "256", "--out", str(out),
                 "--json"]) == 0
    summary = _strict(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("lr_constant", "risk_constant_ode", "risk_schedule_ode", "sgd_risk_constant",
                "sgd_risk_constant_sem", "sgd_risk_schedule", "sgd_risk_schedule_sem", "out"):
        assert key in summary, key
    assert summary["out"] == str(out)
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "meta.json",
                                                     "schedule.json", "schedule.npz",
                                                     "schedule.png"]
    # the schedule starts flat at the best constant and keeps the best iterate: never worse
    # on the design nodes; at the config's nodes the two are within the node error
    assert summary["risk_schedule_ode"] <= summary["risk_constant_ode"] * (1 + 1e-3)
    with np.load(out / "schedule.npz") as z:
        assert z["sgd_constant"].shape == (2, 11) == z["sgd_schedule"].shape
        np.testing.assert_allclose(z["sgd_schedule"][:, -1].mean(),
                                   summary["sgd_risk_schedule"])
        np.testing.assert_allclose(z["ode_constant"][-1], summary["risk_constant_ode"])
        assert len(z["knot_values"]) == 3
    assert summary["schedule"]["kind"] == "log" and len(summary["schedule"]["times"]) == 3
    assert _strict((out / "meta.json").read_text())["command"] == "schedule"


@pytest.mark.parametrize("argv,needle", [
    (["--knots", "1"], "--knots 1"),
    (["--budget", "0"], "--budget"),
    (["--lr-range", "2,1"], "LOW < HIGH"),
    (["--set", "training.lr_schedule={times = [1, 2], values = [1, 1]}"],
     "already sets training.lr_schedule"),
])
def test_schedule_bad_inputs(tmp_path, capsys, argv, needle):
    out = tmp_path / "o"
    budget = [] if "--budget" in argv else ["--budget", "2"]
    try:    # argparse's errors exit, the command's errors return: both with status 2
        code = main(["schedule", *TINY, *budget, *argv, "--out", str(out), "--steps", "1",
                     "--design-samples", "256", "--dim", "200", "--seeds", "2"])
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    _one_line_error(capsys, needle)
    assert not out.exists()


def _fit_made_curve(tmp_path, capsys, sets, risk, t, start, *extra):
    """`headflow fit --json` of `(t, risk)` for training.lr and model.noise, from `start`, on the
    config `sets`; the JSON summary (checked: recovered) and the output folder."""
    curve = tmp_path / "curve.npz"
    np.savez(curve, t=t, risk=risk)
    out = tmp_path / "fit"
    argv = [x for s in sets for x in ("--set", s)]
    starts = [x for k, v in start.items() for x in ("--set", f"{k}={v}")]
    assert main(["fit", *argv, *starts, "--curve", str(curve), "--params",
                 "training.lr,model.noise", *extra, "--out", str(out), "--json"]) == 0
    return _strict(capsys.readouterr().out.strip().splitlines()[-1]), out


def _assert_recovered(summary, truth):
    for k, v in truth.items():
        assert summary["values"][k] == pytest.approx(v, rel=1e-5), k
    assert summary["residual_rms"] < 1e-6 and summary["converged"]


@pytest.mark.slow
def test_fit_recovers_an_ode_curve(tmp_path, capsys):
    """A curve made by the ODE at known η and Δ is fitted from a start 20% off."""
    sets = ["model.L=2", "model.H=1", "ode.samples=64", "output.n_save=11", "training.t_max=6",
            "model.activation=softmax1"]
    truth = {"training.lr": 0.7, "model.noise": 0.3}
    cfg = load_config(None, sets)
    summary, out = _fit_made_curve(tmp_path, capsys, sets, np.asarray(learning_curve(truth, cfg)),
                                   cfg.save_times(), {"training.lr": 0.85, "model.noise": 0.24})
    _assert_recovered(summary, truth)
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "fit.json", "fit.npz",
                                                     "fit.png", "meta.json"]


# the committee's SDE curve of `tests/test_committee_curve.py` (its TOML and SDE settings, the
# same save times and start): the fit's programs are those of its library-level test, which the
# session's compilation cache shares
COMMITTEE_SDE = ['model.kind="committee"', "model.K=2", "model.M=2", "model.noise=0.2",
                 "model.train_second_layer=true", "training.lr=0.5", "training.lr_second=0.3",
                 "training.t_max=5.0", "output.n_save=6", "ode.rtol=1e-10", "ode.atol=1e-12",
                 "sim.dim=300", "sde.paths=4", "sde.dt=0.25", "sde.samples_noise=256"]


@pytest.mark.slow
def test_fit_sde_recovers_an_sde_curve(tmp_path, capsys):
    """`--model sde`: the mean of an SDE ensemble made at known η and σ (the same paths) is
    fitted from (0.7, 0.1)."""
    from headflow.dynamics.sde import SDECurve

    cfg = load_config(None, COMMITTEE_SDE)
    truth = {"training.lr": 0.5, "model.noise": 0.2}
    risk = np.asarray(SDECurve.from_config(cfg)(truth))
    summary, out = _fit_made_curve(tmp_path, capsys, COMMITTEE_SDE, risk[1:],
                                   cfg.save_times()[1:], {"training.lr": 0.7, "model.noise": 0.1},
                                   "--model", "sde")
    assert summary["model"] == "sde" and summary["paths"] == 4
    _assert_recovered(summary, truth)
    assert _strict((out / "meta.json").read_text())["model"] == "sde"


@pytest.mark.parametrize("argv,needle", [
    (["--params", "training.lr", "--curve", "CURVE", "--paths", "4"], "--paths: only with"),
    (["--params", "training.lr", "--curve", "missing.npz"], "file not found"),
    (["--params", "training.momentum", "--curve", "CURVE"], "training.momentum"),
    (["--params", "training.lr_schedule", "--curve", "CURVE"], "choose distinct keys among"),
    (["--params", "training.lr", "--curve", "BAD"], "no array risk"),
])
def test_fit_bad_inputs(tmp_path, capsys, argv, needle):
    good, bad = tmp_path / "c.npz", tmp_path / "b.npz"
    np.savez(good, t=np.linspace(0, 1, 5), risk=np.linspace(1, 0.5, 5))
    np.savez(bad, t=np.linspace(0, 1, 5))
    argv = [str(good) if a == "CURVE" else str(bad) if a == "BAD" else
            str(tmp_path / a) if a == "missing.npz" else a for a in argv]
    out = tmp_path / "o"
    assert main(["fit", *TINY, *argv, "--out", str(out)]) == 2
    _one_line_error(capsys, needle)
    assert not out.exists()
    assert not any(Path(tmp_path).glob("o*"))


@pytest.mark.slow
def test_fit_linearization_keeps_only_the_jacobian():
    """The fit's residuals go through `materialized`: the same curve and the same tangents (to
    round-off), but optimistix's `jax.linearize` of it keeps the `(T, p)` Jacobian instead of
    the intermediates of the risk at every path and save time, so its memory does not grow with
    the number of save times (at 32 SDE paths of the demo config, the plain curve's
    linearization asked for 31 GB)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    from test_learning_curve import SDE_BASE

    from headflow.dynamics.sde import SDECurve
    from headflow.validation.experiments.fit import materialized

    y = {"training.lr": jnp.asarray(0.8), "model.noise": jnp.asarray(0.25)}
    ty = {"training.lr": jnp.asarray(1.0), "model.noise": jnp.asarray(-0.5)}

    def linearized(fn, n_save):
        curve = SDECurve.from_config(load_config(None, [*SDE_BASE, f"output.n_save={n_save}"]))
        dyn, static = eqx.partition(curve, eqx.is_array)

        def run(y, dyn):
            out, lin = jax.linearize(lambda y: fn(y, eqx.combine(dyn, static)), y)
            return out, lin(ty)
        compiled = jax.jit(run).lower(y, dyn).compile()
        return compiled(y, dyn), compiled.memory_analysis().temp_size_in_bytes

    plain = lambda y, c: c(y)                                      # noqa: E731
    _, mem = linearized(materialized, 6)
    (out, t_out), mem_long = linearized(materialized, 24)          # four times the saves
    (ref, t_ref), mem_ref_long = linearized(plain, 24)
    np.testing.assert_allclose(out, ref, rtol=1e-12)
    np.testing.assert_allclose(t_out, t_ref, rtol=1e-9, atol=1e-12)
    assert np.all(np.abs(np.asarray(t_ref)[1:]) > 1e-6)          # the tangent is not trivial
    # at 24 saves the plain linearization keeps several times the materialized one's memory,
    # which has not grown from its 6 saves
    assert mem_ref_long > 3 * mem_long, (mem, mem_long, mem_ref_long)
    assert mem_long - mem < 0.05 * (mem_ref_long - mem), (mem, mem_long, mem_ref_long)
