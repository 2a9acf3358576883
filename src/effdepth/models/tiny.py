"""Tiny randomly initialised models, for tests and offline demos: each family's real architecture class
(``AutoConfig.for_model`` then ``from_config``) with a few layers and a small hidden size; nothing downloaded.
"""

from __future__ import annotations

import torch

from effdepth.errors import EffdepthError
from effdepth.models.registry import ARCHITECTURES

TINY_LAYERS = 3
TINY_HIDDEN = 64
TINY_VOCAB = 259  # matches effdepth.data.byte_tokenizer()

# The byte tokenizer's specials, so every id is inside the tiny vocabulary.
_BYTE_SPECIALS = {"bos_token_id": 256, "eos_token_id": 257, "pad_token_id": 258}
_COMMON = {
    "num_hidden_layers": TINY_LAYERS,
    "hidden_size": TINY_HIDDEN,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": TINY_VOCAB,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
    **_BYTE_SPECIALS,
}

_FAMILY_OVERRIDES = {
    "gpt2": {
        "n_layer": TINY_LAYERS,
        "n_embd": TINY_HIDDEN,
        "n_head": 4,
        "vocab_size": TINY_VOCAB,
        "n_positions": 512,
        **_BYTE_SPECIALS,
    },
    "gpt_neox": {**_COMMON, "num_key_value_heads": None, "rotary_pct": 0.25},
    "gemma": {**_COMMON, "head_dim": 16},
    "gemma2": {**_COMMON, "head_dim": 16},
    "gemma3_text": {**_COMMON, "head_dim": 16, "sliding_window": 8},
    "qwen3": {**_COMMON, "head_dim": 16},
    "olmo3": {**_COMMON, "sliding_window": 8},
    # Without explicit layer_types a tiny Qwen3.5 config is all linear attention (docs/capture.md, fact 7).
    "qwen3_5_text": {
        **_COMMON,
        "head_dim": 16,
        "layer_types": ["linear_attention", "linear_attention", "full_attention"],
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
    },
}

#: Every supported architecture has a tiny random model.
TINY_MODEL_TYPES = tuple(ARCHITECTURES)


def tiny_config(model_type: str):
    """A real config of ``model_type`` shrunk to 3 layers, hidden size 64.

    >>> tiny_config("llama").num_hidden_layers
    3
    """
    from transformers import AutoConfig

    if model_type not in TINY_MODEL_TYPES:
        raise EffdepthError(f"no tiny config for {model_type!r}; available: {', '.join(TINY_MODEL_TYPES)}")
    if model_type in ("qwen3_5", "gemma3"):
        # Vision-language wrappers: shrink the text model and the vision tower.
        text = tiny_config(f"{model_type}_text")
        config = AutoConfig.for_model(model_type, text_config=text.to_dict())
        vision = config.vision_config
        for key, value in {
            "depth": 1,
            "num_hidden_layers": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "num_attention_heads": 2,
            "out_hidden_size": TINY_HIDDEN,
        }.items():
            if hasattr(vision, key):
                setattr(vision, key, value)
        return config
    fields = _FAMILY_OVERRIDES.get(model_type, _COMMON)
    config = AutoConfig.for_model(model_type, **{k: v for k, v in fields.items() if v is not None})
    if getattr(config, "layer_types", None) is not None and len(config.layer_types) != TINY_LAYERS:
        config.layer_types = config.layer_types[:TINY_LAYERS]
    return config


def tiny_model(model_type: str, seed: int = 0):
    """A randomly initialised causal LM of ``model_type`` (eval mode, float32).

    >>> m = tiny_model("gpt2")
    >>> type(m).__name__, m.config.n_layer
    ('GPT2LMHeadModel', 3)
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    config = tiny_config(model_type)
    torch.manual_seed(seed)
    if model_type in ("qwen3_5", "gemma3"):
        model = AutoModelForImageTextToText.from_config(config)
    else:
        model = AutoModelForCausalLM.from_config(config)
    return model.eval()


def tiny_gguf(path, *, seed: int = 0, layers: int = 2, quantized: bool = True):
    """Write a tiny random Llama as a ``.gguf`` file (Q8_0, the byte tokenizer's vocabulary); its path.

    >>> import tempfile
    >>> from pathlib import Path
    >>> p = tiny_gguf(Path(tempfile.mkdtemp()) / "tiny.gguf")
    >>> p.read_bytes()[:4], p.stat().st_size > 50_000
    (b'GGUF', True)
    """
    from pathlib import Path

    import gguf
    import numpy as np

    from effdepth.data.tokenizers import BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, _byte_to_unicode

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    d, ff, heads, kv, vocab = TINY_HIDDEN, 128, 4, 2, TINY_VOCAB
    head_dim = d // heads
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("effdepth tiny llama")
    w.add_context_length(512)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    # A byte-level BPE without merges: one token per byte, as effdepth.data.byte_tokenizer().
    chars = _byte_to_unicode()
    w.add_tokenizer_model("gpt2")
    w.add_token_list([chars[b] for b in range(256)] + [BOS_TOKEN, EOS_TOKEN, PAD_TOKEN])
    w.add_token_types([1] * 256 + [3] * 3)
    w.add_token_scores([0.0] * vocab)
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)
    w.add_pad_token_id(258)
    qtype = gguf.GGMLQuantizationType.Q8_0

    def matrix(name, rows, cols):
        values = (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)
        if quantized:
            w.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, values)

    def norm(name):
        w.add_tensor(name, (1 + 0.05 * rng.standard_normal(d)).astype(np.float32))

    matrix("token_embd.weight", vocab, d)
    for i in range(layers):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", d, d)
        matrix(f"blk.{i}.attn_k.weight", kv * head_dim, d)
        matrix(f"blk.{i}.attn_v.weight", kv * head_dim, d)
        matrix(f"blk.{i}.attn_output.weight", d, d)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", ff, d)
        matrix(f"blk.{i}.ffn_up.weight", ff, d)
        matrix(f"blk.{i}.ffn_down.weight", d, ff)
    norm("output_norm.weight")
    matrix("output.weight", vocab, d)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
