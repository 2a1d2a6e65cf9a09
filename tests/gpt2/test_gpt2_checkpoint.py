"""Checkpoint round trip and the one-line errors of every bad input."""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import headflow.validation.gpt2 as g
from headflow.dynamics import HeadflowError
from headflow.validation.cli import main


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_round_trip(small_checkpoint):
    model = g.load_checkpoint(small_checkpoint)
    again = g.load_checkpoint(g.save_checkpoint(model, small_checkpoint.parent / "again"))
    for a, b in zip(jax.tree_util.tree_leaves(model), jax.tree_util.tree_leaves(again)):
        assert a.dtype == jnp.float32 and np.array_equal(a, b)


def _error(fn, *args) -> str:
    with pytest.raises(HeadflowError) as info:
        fn(*args)
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 400
    return msg


def test_corrupt_file(small_checkpoint, tmp_path):
    ck = _copy(small_checkpoint, tmp_path / "ck")
    data = (ck / "model.safetensors").read_bytes()
    (ck / "model.safetensors").write_bytes(data[: len(data) // 3])
    assert "corrupt" in _error(g.load_checkpoint, ck)
    (ck / "model.safetensors").write_bytes(b"\x00garbage")
    assert "corrupt" in _error(g.load_checkpoint, ck)


def test_missing_tensor(small_checkpoint, tmp_path):
    ck = _copy(small_checkpoint, tmp_path / "ck")
    tensors = load_file(str(ck / "model.safetensors"))
    del tensors["h.1.mlp.c_fc.bias"]
    save_file(tensors, str(ck / "model.safetensors"), metadata={"format": "pt"})
    assert "missing tensor 'h.1.mlp.c_fc.bias'" in _error(g.load_checkpoint, ck)


def test_shape_mismatch(small_checkpoint, tmp_path):
    ck = _copy(small_checkpoint, tmp_path / "ck")
    tensors = load_file(str(ck / "model.safetensors"))
    tensors["h.0.attn.c_attn.weight"] = np.ascontiguousarray(tensors["h.0.attn.c_attn.weight"].T)
    save_file(tensors, str(ck / "model.safetensors"), metadata={"format": "pt"})
    msg = _error(g.load_checkpoint, ck)
    assert "h.0.attn.c_attn.weight" in msg and "(192, 64)" in msg and "(64, 192)" in msg
    cfg = json.loads((small_checkpoint / "config.json").read_text())
    cfg["n_embd"] = 96
    shutil.copy(small_checkpoint / "model.safetensors", ck / "model.safetensors")
    (ck / "config.json").write_text(json.dumps(cfg))
    assert "shape" in _error(g.load_checkpoint, ck)


def test_missing_files(small_checkpoint, tmp_path):
    assert "not a folder" in _error(g.load_checkpoint, tmp_path / "nowhere")
    ck = _copy(small_checkpoint, tmp_path / "ck")
    (ck / "model.safetensors").unlink()
    assert "model.safetensors" in _error(g.load_checkpoint, ck)
    (ck / "config.json").write_text("{not json")
    assert "JSON" in _error(g.load_checkpoint, ck)
    (ck / "config.json").unlink()
    assert "config.json" in _error(g.load_checkpoint, ck)


def test_missing_tokenizer_file(small_checkpoint, tmp_path):
    ck = _copy(small_checkpoint, tmp_path / "ck")
    (ck / "merges.txt").unlink()
    assert "missing merges.txt" in _error(g.load_tokenizer, ck)
    (ck / "vocab.json").write_text("[1, 2")
    (ck / "merges.txt").write_text("#version: 0.2\n")
    assert "cannot read" in _error(g.load_tokenizer, ck)
    assert "not found" in _error(g.load_tokenizer, tmp_path / "none")


def test_text_shorter_than_length(small_checkpoint, tmp_path):
    tok = g.load_tokenizer(small_checkpoint)
    msg = _error(g.text_tokens, tok, "Well, Prince, so Genoa and Lucca", 64)
    assert "only" in msg and "L=64" in msg


def _cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_errors_are_one_line(small_checkpoint, tmp_path, capsys, text_path):
    short = tmp_path / "short.txt"
    short.write_text("A very short text.")
    code, _, err = _cli(["gpt2", "bounds", "--checkpoint", str(small_checkpoint), "--text",
                         str(short), "--length", "64", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and err.startswith("headflow: error:") and err.count("\n") == 1
    assert "tokens" in err and not (tmp_path / "o").exists()
    ck = _copy(small_checkpoint, tmp_path / "ck")
    (ck / "vocab.json").unlink()
    code, _, err = _cli(["gpt2", "extract", "--checkpoint", str(ck), "--tokenizer", str(ck),
                         "--text", str(text_path), "--length", "16", "--out",
                         str(tmp_path / "x.npz")], capsys)
    assert code == 2 and "vocab.json" in err and err.count("\n") == 1
    code, _, err = _cli(["gpt2", "extract", "--checkpoint", str(small_checkpoint), "--text",
                         str(text_path), "--length", "4096", "--out", str(tmp_path / "x.npz")],
                        capsys)
    assert code == 2 and "n_positions" in err
    code, _, err = _cli(["gpt2", "bounds", "--checkpoint", str(small_checkpoint), "--text",
                         str(text_path), "--set", "reading=cosine"], capsys)
    assert code == 2 and "bounds.reading" in err
    code, _, err = _cli(["gpt2", "bounds", "--checkpoint", str(small_checkpoint), "--text",
                         str(text_path), "--set", "nonsense=1"], capsys)
    assert code == 2 and "unknown key" in err
    with pytest.raises(SystemExit) as info:
        main(["gpt2", "random-checkpoint", "--layers", "0"])
    assert info.value.code == 2


def test_text_windows_match_whole_text_tokenization(small_checkpoint, text_path):
    """Only a prefix is tokenized, yet the windows equal those of the whole text."""
    tok = g.load_tokenizer(small_checkpoint)
    text = g.read_text(text_path)[:200_000]
    whole = g.encode(tok, text)
    got = g.text_tokens(tok, text, 300, offset=17, windows=3)
    assert got.dtype == np.int32 and got.shape == (3, 300)
    assert np.array_equal(got.reshape(-1), whole[17:17 + 900])
