"""GPT-2 in JAX against Hugging Face transformers (PyTorch, CPU, eager attention)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import torch           # declared test dependencies (`.[test]`): a broken install fails here
import transformers

import headflow.validation.gpt2 as g


def _hf_model(folder):
    return transformers.GPT2LMHeadModel.from_pretrained(
        str(folder), attn_implementation="eager", dtype=torch.float32).eval()


def _compare(folder, tokens):
    ours = g.load_checkpoint(folder)
    out = jax.jit(lambda m, t: m(t, capture=("attn",)))(ours, jnp.asarray(tokens, jnp.int32))
    with torch.no_grad():
        ref = _hf_model(folder)(torch.tensor(np.asarray(tokens)[None]), output_attentions=True)
    logits_err = float(np.max(np.abs(np.asarray(out.logits) - ref.logits[0].numpy())))
    attn_err = max(float(np.max(np.abs(np.asarray(out.attn[i]) - a[0].numpy())))
                   for i, a in enumerate(ref.attentions))
    return logits_err, attn_err


@pytest.mark.slow
@pytest.mark.parametrize("std", [0.02, 0.3])
@pytest.mark.parametrize("inverse_layer_scaling", [False, True])
def test_parity_with_transformers(tmp_path, std, inverse_layer_scaling):
    cfg = g.GPT2Config(vocab_size=512, n_positions=96, n_embd=48, n_layer=3, n_head=4,
                       scale_attn_by_inverse_layer_idx=inverse_layer_scaling)
    model = g.init_gpt2(cfg, jr.key(1), std=std)
    # Non-trivial biases and LayerNorm gains, so every parameter is exercised.
    model = jax.tree_util.tree_map(
        lambda a: a + 0.05 * jr.normal(jr.key(a.size % 97), a.shape, a.dtype)
        if a.ndim >= 1 and a.dtype == jnp.float32 else a, model)
    g.save_checkpoint(model, tmp_path / "ck")
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, cfg.n_positions)
    logits_err, attn_err = _compare(tmp_path / "ck", tokens)
    assert logits_err <= 1e-4
    assert attn_err <= 1e-5


@pytest.mark.slow
def test_parity_on_text(small_checkpoint, text_path, tokenizer_dir):
    tok = g.load_tokenizer(small_checkpoint)
    tokens = g.text_tokens(tok, g.read_text(text_path), 128)[0]
    logits_err, attn_err = _compare(small_checkpoint, tokens)
    assert logits_err <= 1e-4 and attn_err <= 1e-5


def test_tokenizer_matches_transformers(tokenizer_dir, text_path):
    ours = g.load_tokenizer(tokenizer_dir)
    ref = transformers.GPT2TokenizerFast.from_pretrained(str(tokenizer_dir))
    text = g.read_text(text_path)[:30000] + " naïve café — ’quotes’ 1805\n\n  spaces"
    assert ours.encode(text).ids == ref(text)["input_ids"]
    assert ours.decode(ours.encode(text).ids) == text


def test_loads_transformers_save_pretrained(tmp_path):
    """`save_pretrained` writes `transformer.`-prefixed names; both layouts load."""
    hf_cfg = transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=32, n_layer=2,
                                     n_head=2)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    hf.save_pretrained(tmp_path / "hf", safe_serialization=True)
    ours = g.load_checkpoint(tmp_path / "hf")
    tokens = np.arange(32) % 300
    with torch.no_grad():
        ref = hf(torch.tensor(tokens[None])).logits[0].numpy()
    got = np.asarray(ours(jnp.asarray(tokens, jnp.int32)).logits)
    assert np.max(np.abs(got - ref)) <= 1e-4


def test_float32_under_x64_and_capture(small_config):
    assert jax.config.jax_enable_x64  # importing dynamics turned it on
    model = g.init_gpt2(small_config, jr.key(3))
    assert all(a.dtype == jnp.float32 for a in jax.tree_util.tree_leaves(model))
    tokens = jnp.arange(20, dtype=jnp.int32)
    out = model(tokens, capture=("q", "attn"), logits=False)
    assert out.logits is None and out.k is None and out.v is None and out.hidden is None
    assert out.q.dtype == jnp.float32 and out.attn.dtype == jnp.float32
    assert out.q.shape == (2, 4, 20, 16) and out.attn.shape == (2, 4, 20, 20)
    attn = np.asarray(out.attn)
    assert np.allclose(attn.sum(-1), 1, atol=1e-5)
    assert np.all(np.triu(attn, 1) == 0)  # masked before the softmax: exact zeros
    with pytest.raises(ValueError):
        model(tokens, capture=("queries",))


def test_prefix_window_identity(small_config):
    """Causal attention: the first L tokens' attention is the top-left block of a longer pass
    (the experiments rely on this to get every L from one forward pass)."""
    model = g.init_gpt2(small_config, jr.key(4), std=0.2)
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 50257, 100), jnp.int32)
    full = model(tokens, capture=("attn", "v"), logits=False)
    part = model(tokens[:37], capture=("attn", "v"), logits=False)
    assert np.allclose(full.attn[:, :, :37, :37], part.attn, atol=1e-6)
    assert np.allclose(full.v[:, :, :37], part.v, atol=1e-5)


def test_random_checkpoint_layout(small_checkpoint, small_config):
    cfg = json.loads((small_checkpoint / "config.json").read_text())
    assert cfg["model_type"] == "gpt2" and cfg["n_layer"] == 2
    from safetensors import safe_open

    with safe_open(str(small_checkpoint / "model.safetensors"), framework="numpy") as f:
        names = set(f.keys())
        assert f.get_tensor("h.0.attn.c_attn.weight").shape == (64, 192)  # Conv1D: in × out
    assert "lm_head.weight" not in names  # tied
    hf = _hf_model(small_checkpoint)
    assert hf.config.n_embd == small_config.n_embd
