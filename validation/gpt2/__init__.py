"""GPT-2 in JAX with explicit attention, and the attention-normalization bounds checked on it."""

from ._checkpoint import load_checkpoint as load_checkpoint
from ._checkpoint import save_checkpoint as save_checkpoint
from ._config import GPT2Config as GPT2Config
from ._model import GPT2 as GPT2
from ._model import GPT2Output as GPT2Output
from ._model import causal_attention as causal_attention
from ._model import init_gpt2 as init_gpt2
from ._tokenizer import load_tokenizer as load_tokenizer
from ._tokenizer import text_tokens as text_tokens
