"""GPT-2 in JAX with explicit attention, and the attention-normalization bounds checked on it.

Model and data: [`GPT2Config`][], [`GPT2`][], [`init_gpt2`][], [`load_checkpoint`][],
[`save_checkpoint`][], [`load_tokenizer`][], [`text_tokens`][], and where the BPE files and a
text come from ([`find_bpe_dir`][], [`find_text`][], [`fallback_text`][]). Normalizers:
[`Softmax`][], [`Sparsemax`][], [`ScalableSoftmax`][], [`SelfAdjustingSoftmax`][] (by name:
[`normalizer_from_name`][]). Bounds (pure, vectorized over `(heads, rows, tokens)`; see
`docs/gpt2.md`, "The bounds"): Lemma 1 / Corollary 1, Theorem 1, Theorem 2, Lemma 2 /
Corollary 3, entropy. Experiments: [`BoundsConfig`][], [`run_bounds`][], and experiments 1–4
on one layer's heads (`distance_chunk`, `critical_chunk`, `separability_chunk`);
training: [`TrainConfig`][], [`train_gpt2`][], [`min_tokens`][].
"""

from ._bounds_config import BoundsConfig as BoundsConfig
from ._bounds_config import default_critical_grid as default_critical_grid
from ._bounds_config import parse_override as parse_override
from ._checkpoint import check_checkpoint as check_checkpoint
from ._checkpoint import load_checkpoint as load_checkpoint
from ._checkpoint import save_checkpoint as save_checkpoint
from ._config import GPT2Config as GPT2Config
from ._data import bpe_files as bpe_files
from ._data import fallback_text as fallback_text
from ._data import find_bpe_dir as find_bpe_dir
from ._data import find_text as find_text
from ._distance import FixedSetBound as FixedSetBound
from ._distance import distance_tables as distance_tables
from ._distance import distances_to_context as distances_to_context
from ._distance import fixed_set_bound as fixed_set_bound
from ._distance import left_out_diameter as left_out_diameter
from ._distance import random_set_distance as random_set_distance
from ._distance import random_set_distance_mc as random_set_distance_mc
from ._distance import random_set_distances as random_set_distances
from ._distance import selection_distance as selection_distance
from ._distance import topn_distances as topn_distances
from ._experiments import BoundsResult as BoundsResult
from ._experiments import _critical_chunk as critical_chunk  # noqa: F401
from ._experiments import _distance_chunk as distance_chunk  # noqa: F401
from ._experiments import _separability_chunk as separability_chunk  # noqa: F401
from ._experiments import extract as extract
from ._experiments import run_bounds as run_bounds
from ._plots import plot_bounds as plot_bounds
from ._plots import plot_coverage as plot_coverage
from ._plots import plot_normalizers as plot_normalizers
from ._summaries import Summary as Summary
from ._model import GPT2 as GPT2
from ._model import GPT2Output as GPT2Output
from ._model import causal_attention as causal_attention
from ._model import init_gpt2 as init_gpt2
from ._normalizers import AbstractNormalizer as AbstractNormalizer
from ._normalizers import NORMALIZER_NAMES as NORMALIZER_NAMES
from ._normalizers import AbstractPositiveNormalizer as AbstractPositiveNormalizer
from ._normalizers import MinMaxSelfAdjustingSoftmax as MinMaxSelfAdjustingSoftmax
from ._normalizers import ScalableSoftmax as ScalableSoftmax
from ._normalizers import SelfAdjustingSoftmax as SelfAdjustingSoftmax
from ._normalizers import Softmax as Softmax
from ._normalizers import Sparsemax as Sparsemax
from ._normalizers import normalizer_from_name as normalizer_from_name
from ._normalizers import top_eigenvalue as top_eigenvalue
from ._selection import causal_context as causal_context
from ._selection import random_ranks as random_ranks
from ._selection import topn_mask as topn_mask
from ._selection import topn_order as topn_order
from ._selection import topn_order_host as topn_order_host
from ._selection import visible_mask as visible_mask
from ._sensitivity import fd_sensitivity as fd_sensitivity
from ._sensitivity import random_unit_directions as random_unit_directions
from ._sensitivity import softmax_jacobian as softmax_jacobian
from ._sensitivity import softmax_jacobian_diag_max as softmax_jacobian_diag_max
from ._sensitivity import softmax_jacobian_norm as softmax_jacobian_norm
from ._separability import Separability as Separability
from ._separability import distinguished as distinguished
from ._separability import prefix_min_distance2 as prefix_min_distance2
from ._separability import separability as separability
from ._separability import separability_curve as separability_curve
from ._separability import sphere_normalize as sphere_normalize
from ._tokenizer import encode as encode
from ._tokenizer import has_tokenizer as has_tokenizer
from ._tokenizer import load_tokenizer as load_tokenizer
from ._tokenizer import read_text as read_text
from ._tokenizer import text_tokens as text_tokens
from ._train import TrainConfig as TrainConfig
from ._train import check_train_length as check_train_length
from ._train import min_tokens as min_tokens
from ._train import train_gpt2 as train_gpt2
from ._vanishing import attention_entropy as attention_entropy
from ._vanishing import softmax_weight_bounds as softmax_weight_bounds
from ._vanishing import weight_bound_violations as weight_bound_violations
