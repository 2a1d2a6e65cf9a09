"""The command line end to end on small models: random-checkpoint, extract, bounds, train."""

from __future__ import annotations

import contextlib
import io
import json

import jax.numpy as jnp
import numpy as np
import pytest

import headflow.validation.gpt2 as g
from headflow.validation.cli import main

pytestmark = pytest.mark.usefixtures("fast_compile")  # compile-bound: XLA at -O0


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def bounds_run(tmp_path_factory, small_checkpoint, text_path):
    out = tmp_path_factory.mktemp("bounds") / "run"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["gpt2", "bounds", "--checkpoint", str(small_checkpoint), "--text",
                     str(text_path), "--length", "128", "--mc-samples", "3", "--set",
                     "gradient_rows=32", "--out", str(out), "--json"])
    assert code == 0
    return out, json.loads(buffer.getvalue().strip().splitlines()[-1])


def _strict(text: str):
    def refuse(token):
        raise ValueError(f"non-strict JSON constant {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.slow
def test_bounds_outputs(bounds_run):
    bounds_run, summary = bounds_run
    for key in ("critical_n_over_L", "separability_plateau", "rigorous_violations", "wall_s", "out",
                "theorem1_bound_over_distance", "coverage_p"):
        assert key in summary
    assert summary["rigorous_violations"] == 0
    names = {p.name for p in bounds_run.iterdir()}
    assert {"report.json", "curves.npz", "config.toml", "meta.json", "fig2_distance.png",
            "fig3_critical_separability.png", "fig4_gradient.png", "entropy.png",
            "coverage.png"} <= names
    report = _strict((bounds_run / "report.json").read_text())
    assert report["distance_vs_L"]["L"] == [32, 64, 128]
    assert report["rigorous_violations"] == 0 and report["checked"]["theorem1_fixed_set"] > 0
    assert 0 <= report["separability_plateau"][0] <= report["separability_plateau"][1] <= 1


@pytest.mark.slow
def test_bounds_report_is_consistent(bounds_run):
    """Numbers computed by different code paths agree, and the theory's orderings hold."""
    bounds_run, _ = bounds_run
    report = json.loads((bounds_run / "report.json").read_text())
    curves = np.load(bounds_run / "curves.npz")
    e1, e2 = report["distance_vs_L"], report["distance_vs_N"]
    # experiment 2 at N = 5 is experiment 1 at the largest L
    assert e2["distance"][e2["N"].index(5)] == pytest.approx(e1["distance"][-1], rel=1e-6)
    # experiment 3's grid recomputes the same d̃ and formula
    grid = list(curves["e3_grid"])
    for i, n in enumerate(e2["N"]):
        if n in grid:
            j = grid.index(n)
            assert curves["e3_top_at_L"][j].mean() == pytest.approx(e2["distance"][i], rel=1e-5)
            assert curves["e3_formula_at_L"][j].mean() == pytest.approx(
                e2["random_formula"][i], rel=1e-5
            )
    # Theorem 1's bound above the distance, its weaker form above it; Jensen: formula ≤ MC (mean)
    assert all(b >= d for b, d in zip(e1["bound"], e1["distance"]))
    assert all(b2 >= b for b, b2 in zip(e1["bound"], e1["bound_max"]))
    assert all(f <= m * 1.05 for f, m in zip(e2["random_formula"], e2["random_mc"]))
    e4 = report["separability"]
    assert all(lo <= r + 1e-6 for lo, r in zip(e4["lower"], e4["ratio"])) and e4["ratio"][0] == 1
    e5 = report["gradient"]
    assert all(
        j <= b * (1 + 1e-4) for j, b in zip(e5["jacobian_norm"], e5["bound_spectral_1_over_2T"])
    )
    # entropy below log L (Lemma 1's uniform limit is log L)
    assert all(h <= np.log(L) + 1e-4 for h, L in zip(e1["entropy_last_row"], e1["L"]))
    # Theorem 1: the weaker form is above the bound, and the ratios are the curves' ratios
    assert all(
        r2 >= r * (1 - 1e-6)
        for r, r2 in zip(e2["bound_over_distance"], e2["bound_max_over_distance"])
    )
    assert e1["bound_over_distance"][-1] == pytest.approx(e1["bound"][-1] / e1["distance"][-1])


@pytest.mark.slow
def test_bounds_coverage_identities(bounds_run):
    """Coverage by one head is the mean p; coverage grows with the heads; the formula and the
    independent-heads value agree at h = 1; `L · max α ≥ 1` (weights sum to one)."""
    bounds_run, _ = bounds_run
    report = _strict((bounds_run / "report.json").read_text())
    cov = report["coverage"]
    assert cov["H"] == list(range(1, report["model"]["n_head"] + 1))
    assert cov["paper_example"]["heads_for_target"] == 3
    for c in cov["N"].values():
        assert 0 <= c["p_mean"] <= 1 and c["rows"] > 0
        assert c["coverage"][0] == pytest.approx(c["p_mean"], rel=1e-9)
        assert c["formula"][0] == pytest.approx(c["p_mean"], rel=1e-12)
        assert c["independent_heads"][0] == pytest.approx(c["p_mean"], rel=1e-6)
        assert all(b >= a - 1e-12 for a, b in zip(c["coverage"], c["coverage"][1:]))
    assert all(v >= 1 - 1e-5 for v in report["vanishing"]["max_weight_last_row_times_L"])


def test_extract(small_checkpoint, text_path, tmp_path, capsys):
    out = tmp_path / "x.npz"
    summary = _run(
        [
            "gpt2",
            "extract",
            "--checkpoint",
            str(small_checkpoint),
            "--text",
            str(text_path),
            "--length",
            "40",
            "--out",
            str(out),
            "--json",
        ],
        capsys,
    )
    assert summary["out"] == str(out)
    data = np.load(out)
    assert data["q"].shape == data["k"].shape == data["v"].shape == (2, 4, 40, 16)
    assert data["attn"].shape == (2, 4, 40, 40) and data["tokens"].shape == (40,)
    assert data["attn"].dtype == np.float32
    model = g.load_checkpoint(small_checkpoint)
    ref = model(jnp.asarray(data["tokens"]), capture=("attn",), logits=False)
    assert np.allclose(ref.attn, data["attn"], atol=1e-6)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_random_checkpoint_command(tmp_path, capsys, tokenizer_dir):
    out = tmp_path / "rc"
    summary = _run(
        [
            "gpt2",
            "random-checkpoint",
            "--layers",
            "1",
            "--heads",
            "2",
            "--width",
            "8",
            "--vocab",
            "300",
            "--positions",
            "16",
            "--tokenizer",
            str(tokenizer_dir),
            "--out",
            str(out),
            "--json",
        ],
        capsys,
    )
    assert (
        summary["parameters"]
        == g.GPT2Config(vocab_size=300, n_positions=16, n_embd=8, n_layer=1, n_head=2).num_params()
    )
    model = g.load_checkpoint(out)
    assert model.config.n_layer == 1 and (out / "merges.txt").is_file()
    assert sum(np.asarray(a).size for a in [model.wte, model.wpe]) > 0


@pytest.mark.slow
@pytest.mark.usefixtures("optimized")  # compute-bound: full optimization
def test_train_small(tmp_path, capsys, text_path, tokenizer_dir):
    text = tmp_path / "text.txt"
    text.write_text(g.read_text(text_path)[:60000])
    out = tmp_path / "trained"
    summary = _run(
        [
            "gpt2",
            "train",
            "--text",
            str(text),
            "--layers",
            "1",
            "--heads",
            "2",
            "--width",
            "32",
            "--context",
            "64",
            "--steps",
            "60",
            "--batch",
            "4",
            "--lr",
            "1e-2",
            "--predict-fraction",
            "0.5",
            "--tokenizer",
            str(tokenizer_dir),
            "--out",
            str(out),
            "--json",
        ],
        capsys,
    )
    assert summary["loss_last_10_mean"] < summary["loss_first"] - 2.0
    assert summary["val_loss_final"] < summary["val_loss_initial"] - 2.0
    model = g.load_checkpoint(out)
    assert model.config.n_positions == 64
    log = json.loads((out / "train_log.json").read_text())
    assert len(log["loss"]) == 60


@pytest.mark.slow
def test_row_blocks_and_normalizers_side_by_side(small_config):
    """Cutting the causal rows into blocks (each with only its visible tokens) is exact, and
    analysing other normalizers in the same run leaves the softmax results unchanged. The other
    normalizers' rigorous checks pass where their assumptions hold, and are listed as not
    applicable where they do not (signed SA-softmax weights)."""
    import jax.random as jr

    model = g.init_gpt2(small_config, jr.key(5), std=0.3)
    tokens = np.random.default_rng(0).integers(0, 50257, size=(1, 63)).astype(np.int32)
    base = dict(
        lengths=(32, 63),
        n_values=(1, 5),
        separability_n=(1, 2, 4, 8),
        temperatures=(0.1, 1.0),
        gradient_rows=8,
        mc_samples=2,
        coverage_n=(4,),
    )
    names = ("softmax", "sparsemax", "ssmax", "sa-softmax")
    one = g.run_bounds(model, tokens, g.BoundsConfig(row_blocks=1, **base), progress=False)
    # two blocks of 32 and 31 rows (uneven), each cut to the tokens its rows see
    blocks = g.run_bounds(
        model, tokens, g.BoundsConfig(row_blocks=2, normalizers=names, **base), progress=False
    )
    for key, value in one.curves.items():
        assert np.allclose(value, blocks.curves[key], rtol=1e-5, atol=1e-6, equal_nan=True), key
    assert one.report["rigorous_violations"] == blocks.report["rigorous_violations"] == 0
    reports = blocks.report["normalizers"]
    assert list(reports) == list(names) == list(blocks.report["normalizer_comparison"])
    assert reports["softmax"]["distance_vs_L"] == blocks.report["distance_vs_L"]
    for name in ("sparsemax", "ssmax"):
        assert reports[name]["rigorous_violations"] == 0
        assert reports[name]["not_applicable"] == ["corollary1_weights"]
        assert reports[name]["checked"]["theorem1_fixed_set"] > 0
        assert f"{name}/e1_top" in blocks.curves
    assert reports["sa-softmax"]["not_applicable"] == [
        "corollary1_weights",
        "jacobian",
        "theorem1_fixed_set",
        "theorem2_lower",
    ]
    assert reports["sparsemax"]["vanishing"]["zero_weight_fraction"] > 0
    assert reports["softmax"]["vanishing"]["zero_weight_fraction"] == 0
    # sparsemax's Jacobian is a projection divided by T: its norm is 0 or 1/T in every row
    e5 = reports["sparsemax"]["gradient"]
    assert all(0 <= v <= (1 + 1e-6) / t for v, t in zip(e5["jacobian_norm"], e5["T"]))
