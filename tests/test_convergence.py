"""Node convergence of long-time verdicts: the final segment rerun on 4× the nodes
(`headflow.dynamics.ode.node_change`), the verdict that turns into "not resolved by the numerics"
when its margin is below the change (`headflow.validation.experiments.convergence`), and `samples =
"auto"` sized for a target on a reported quantity."""

import numpy as np
import pytest

import headflow.dynamics as d
from headflow.dynamics.ode import (NODE_FACTOR, QUANTITY_REPLICATES, NodeChange, build,
                                   final_risk_of, node_change, refined, replicate_spread,
                                   segment_start, sized, solve_problem)
from scipy.stats import chi2
from headflow.validation.experiments.convergence import (NOT_REPRODUCED, NOT_RESOLVED, REPRODUCED,
                                                         below, judge, overall, within)
from headflow.validation.experiments.pruning import prunable_verdict


def _cfg(*extra: str) -> d.Config:
    """A small attention config (L = 3, H = 2, flipped spike) on a short span."""
    return d.load_config("validation/configs/demo.toml",
                         ["model.L=3", "training.t_max=6.0", "output.n_save=7",
                          'ode.expectation="mc"', *extra])


def _change(value, value_fine, samples=512) -> NodeChange:
    return NodeChange(quantity="final risk", samples=samples, samples_fine=4 * samples,
                      t_from=50.0, t_to=100.0, value=value, value_fine=value_fine)


def test_verdict_flips_to_not_resolved_when_margin_below_node_change():
    # a risk 1.5% above R_Bayes = 0.1 (claim: within 2%), moved by 0.0008 on 4x the nodes
    check = _change(0.1015, 0.1007)
    assert check.change == pytest.approx(8e-4, abs=1e-15)
    v = within("within 2%", 0.1015, 0.1007, 0.1, 0.002, [check])
    assert v.margin == pytest.approx(5e-4) and v.word == NOT_RESOLVED      # 5e-4 < 8e-4
    # the same numbers with a change below the margin: resolved, and the claim holds
    calm = _change(0.1015, 0.1013)
    v = within("within 2%", 0.1015, 0.1013, 0.1, 0.002, [calm])
    assert v.word == REPRODUCED and v.resolved
    # a claim that fails by more than the change: resolved as not reproduced
    v = within("within 2%", 0.1050, 0.1049, 0.1, 0.002, [_change(0.1050, 0.1049)])
    assert v.word == NOT_REPRODUCED
    # a margin above the change that the sampling error still covers: not resolved
    v = within("within 2%", 0.1015, 0.1013, 0.1, 0.002, [calm], error=2e-4)
    assert v.word == NOT_RESOLVED                               # 5e-4 < 2e-4 + 2·2e-4
    # the report carries the node counts, the segment and the change
    s = v.summary()
    c = s["checks"][0]
    assert (c["samples"], c["samples_fine"], c["t_from"], c["t_to"]) == (512, 2048, 50.0, 100.0)
    assert c["change"] == pytest.approx(2e-4) and s["change"] == pytest.approx(2e-4)
    assert "512 -> 2048" in v.line()


def test_verdict_not_resolved_when_the_claim_flips_or_no_check():
    # margins add over the compared runs; the truth at 4x nodes must agree
    a, b = _change(0.30, 0.31), _change(0.32, 0.305)
    v = below("softmax-1 below softmax", 0.30, 0.32, 0.31, 0.305, [a, b])
    assert v.change == pytest.approx(0.025) and v.holds and v.holds_fine is False
    assert v.word == NOT_RESOLVED
    assert judge("no check", True, 1.0, []).word == NOT_RESOLVED   # nothing shows convergence
    # a missing value at one node count (a feature told apart at one count only): inf
    assert _change([10.0, None], [10.0, 12.0]).change == np.inf
    assert overall([judge("x", True, 1.0, [_change(0.1, 0.1)]), v]) == NOT_RESOLVED
    assert overall([judge("x", False, 1.0, [_change(0.1, 0.1)]), v]) == NOT_REPRODUCED


def test_prunable_verdict_margin_and_fine_curve():
    risk = np.array([0.100, 0.1001, 0.1002, 0.50, 1.0])      # 2 prunable within 5%
    e = risk - 1.05 * risk[0]
    check = _change(e, e + 1e-5)
    v = prunable_verdict("bayes_softmax", risk, check, expected=2)
    assert v.holds and v.margin == pytest.approx(1.05 * 0.1 - 0.1002) and v.word == REPRODUCED
    # the 4x-node curve crosses the 5% line one head earlier: not resolved
    e_f = e.copy()
    e_f[2] = 1e-4
    v = prunable_verdict("bayes_softmax", risk, _change(e, e_f), expected=2)
    assert v.holds_fine is False and v.word == NOT_RESOLVED


def test_prunable_verdict_judges_each_entry_against_its_own_node_change():
    # the one-hot pruning curve of docs/activations.md (softmax, 4096 -> 16384 nodes): the entry
    # far above the 5% line (k = 3) moves by 0.022, the ones near it by at most 0.0032
    e = np.array([-0.0086, -0.0052, -0.0075, 0.1689, 0.8184])
    e_f = np.array([-0.0084, -0.0055, -0.0043, 0.1471, 0.8237])
    risk = 0.1729 * 1.05 + e
    risk[0] = 0.1729
    v = prunable_verdict("softmax", risk, _change(e, e_f), expected=2)
    assert v.holds and v.holds_fine and v.word == REPRODUCED
    # the binding entry is k = 2: margin 0.0075 against its change 0.0032
    assert v.margin == pytest.approx(0.0075) and v.change == pytest.approx(0.0032)
    assert "after 2 removals" in v.checks[0].quantity
    # the same with the largest change over the curve, the old rule: not resolved
    assert judge("max rule", True, 0.0052, [_change(e, e_f)]).word == NOT_RESOLVED
    # a near entry whose own change exceeds its margin still leaves it unresolved
    e_f2 = e_f.copy()
    e_f2[1] = -0.0107                                        # same sign, moved by 0.0055
    v = prunable_verdict("softmax", risk, _change(e, e_f2), expected=2)
    assert v.holds_fine and v.word == NOT_RESOLVED and v.change == pytest.approx(0.0055)
    # a curve missing on 4x the nodes: no decision
    v = prunable_verdict("softmax", risk, _change(e, [np.nan] * 5), expected=2)
    assert v.change == np.inf and v.word == NOT_RESOLVED


def test_refined_and_segment_start():
    cfg = _cfg("ode.samples=512")
    assert refined(cfg).ode.samples == NODE_FACTOR * 512
    ts = np.array([0.0, 1.0, 2.0, 4.0, 8.0])
    traj = {"x": np.arange(5.0)[:, None] * np.ones((5, 2))}
    t, s = segment_start(ts, traj)                      # last save at or before 4.0
    assert t == 4.0 and np.all(s["x"] == 3.0)
    t, s = segment_start(ts, traj, fraction=1.0)
    assert t == 0.0 and np.all(s["x"] == 0.0)


@pytest.mark.slow
def test_node_change_reruns_the_final_segment_of_an_ode_run():
    cfg = _cfg("ode.samples=128")
    res = solve_problem(build(cfg))
    t_from, start = segment_start(res.t, res.overlaps)

    def rerun(c, s, t0, t1):
        return final_risk_of(solve_problem(build(c, s, np.linspace(t0, t1, 4))))

    # at the run's own nodes the segment reproduces the run's final risk (solver tolerance)
    assert rerun(cfg, start, t_from, float(res.t[-1])) == pytest.approx(final_risk_of(res),
                                                                       rel=1e-5)
    ch = node_change(rerun, cfg, start, t_from, float(res.t[-1]), final_risk_of(res),
                     quantity="final risk")
    assert (ch.samples, ch.samples_fine, ch.t_from) == (128, 512, t_from)
    assert 0.0 < ch.change < 0.1 * final_risk_of(res)
    # a verdict whose margin is half the measured change is not resolved, twice it is
    r = final_risk_of(res)
    assert within("c", r, ch.value_fine, r - 0.5 * ch.change, 0.0, [ch]).word == NOT_RESOLVED
    assert within("c", r, ch.value_fine, r - 2.0 * ch.change, 0.0, [ch]).word == NOT_REPRODUCED


@pytest.mark.slow
def test_auto_sizing_meets_a_target_on_the_reported_quantity():
    loose = _cfg('ode.samples="auto"', "ode.quantity_target=1.0", "ode.error_target=10.0")
    p0 = build(loose.replace(**{"ode.samples": 64}))     # the model and start in ODE form
    _, info = sized(loose, p0.model, p0.start, p0.times, pilot=256)
    assert info["samples"] == 256                        # both targets met by the pilot
    assert info["pilot_quantity_replicates"] == QUANTITY_REPLICATES

    def q(samples, seed=0):
        c = loose.replace(**{"ode.samples": samples, "ode.seed": seed})
        return final_risk_of(solve_problem(build(c)))

    # the pilot's error is the spread of the quantity over independent node sets
    reps = [q(256, seed=s) for s in range(QUANTITY_REPLICATES)]
    assert info["pilot_quantity_error"] == pytest.approx(np.std(reps, ddof=1), rel=1e-9)
    # a target a third of the pilot's error: about 9x the pilot's nodes (MC rate 1/2)
    target = info["pilot_quantity_error"] / 3
    cfg = loose.replace(**{"ode.quantity_target": target})
    sized_cfg, info = sized(cfg, p0.model, p0.start, p0.times, pilot=256)
    n = int(sized_cfg.ode.samples)
    assert info["samples"] == n and info["quantity_target"] == target and n >= 8 * 256
    # the error of one sized run (one standard deviation over independent node sets, from 8
    # of them) meets the target: rejected at the 1% level when s > target·sqrt(χ²_7(0.99)/7)
    s = float(np.std([q(n, seed=10 + k) for k in range(8)], ddof=1))
    assert s <= target * np.sqrt(chi2.ppf(0.99, 7) / 7)


def test_replicate_spread_is_the_largest_standard_deviation():
    vals = [np.array([1.0, 2.0]), np.array([3.0, 2.5]), np.array([2.0, 2.0])]
    assert replicate_spread(vals) == pytest.approx(1.0)                 # sd of 1, 3, 2
    assert replicate_spread([0.5, 0.5]) == 0.0
    assert replicate_spread([1.0]) == np.inf                            # no spread from one
    assert replicate_spread([1.0, None]) == np.inf                      # a missing value
    assert replicate_spread([np.array([1.0, 2.0]), np.array([1.0, np.nan])]) == np.inf
    assert replicate_spread([np.ones(2), np.ones(3)]) == np.inf         # shapes differ


def test_auto_sizing_on_quadrature_nodes_uses_the_node_change():
    # deterministic nodes have no independent replicates: the pilot's error of the quantity
    # is its change on 4x the nodes over 1 - 4^(-1/2)
    cfg = d.load_config("validation/configs/committee.toml",
                        ["model.K=1", "model.M=1", "training.t_max=2.0", "output.n_save=5",
                         'ode.expectation="quadrature"', 'ode.samples="auto"',
                         "ode.error_target=10.0", "ode.quantity_target=1e-3"])
    p0 = build(cfg.replace(**{"ode.samples": 64}))
    sized_cfg, info = sized(cfg, p0.model, p0.start, p0.times, pilot=64)
    assert "pilot_quantity_replicates" not in info
    coarse = final_risk_of(solve_problem(build(cfg.replace(**{"ode.samples": 64}))))
    fine = final_risk_of(solve_problem(build(cfg.replace(**{"ode.samples": 256}))))
    assert info["pilot_quantity_change"] == pytest.approx(abs(coarse - fine), rel=1e-6, abs=1e-15)
    assert info["pilot_quantity_error"] == pytest.approx(2.0 * info["pilot_quantity_change"])
    want = 64 * (info["pilot_quantity_error"] / 1e-3) ** 2        # rate 1/2
    assert 64 < sized_cfg.ode.samples == 2 ** int(np.ceil(np.log2(want))) < 2 ** 18
