"""Tiny randomly initialised models built from real configs, for tests and offline demos.

Each is the real architecture class of its family (``AutoConfig.for_model``
then ``from_config``), shrunk to a few layers and a small hidden size; nothing
is downloaded.
"""

from __future__ import annotations

import torch

from .errors import EffdepthError

TINY_LAYERS = 3
TINY_HIDDEN = 64
TINY_VOCAB = 259  # matches effdepth.data.byte_tokenizer()

_COMMON = {
    "num_hidden_layers": TINY_LAYERS,
    "hidden_size": TINY_HIDDEN,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": TINY_VOCAB,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
    # The byte tokenizer's specials, so every id is inside the tiny vocabulary.
    "bos_token_id": 256,
    "eos_token_id": 257,
    "pad_token_id": 258,
}

_FAMILY_OVERRIDES = {
    "gpt2": {"n_layer": TINY_LAYERS, "n_embd": TINY_HIDDEN, "n_head": 4, "vocab_size": TINY_VOCAB, "n_positions": 512,
             "bos_token_id": 256, "eos_token_id": 257, "pad_token_id": 258},
    "gpt_neox": {**_COMMON, "num_key_value_heads": None, "rotary_pct": 0.25},
    "gemma2": {**_COMMON, "head_dim": 16},
    "gemma3_text": {**_COMMON, "head_dim": 16, "sliding_window": 8},
    "qwen3": {**_COMMON, "head_dim": 16},
    "olmo3": {**_COMMON, "sliding_window": 8},
    # Qwen3.5 mixes linear and full attention; without explicit layer_types a
    # tiny config makes every layer linear attention (docs/capture.md, fact 7).
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

TINY_MODEL_TYPES = (
    "gpt2",
    "gpt_neox",
    "llama",
    "mistral",
    "phi3",
    "qwen2",
    "qwen3",
    "qwen3_5_text",
    "qwen3_5",
    "olmo2",
    "olmo3",
    "gemma2",
    "gemma3_text",
    "gemma3",
)


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
        for key, value in {"depth": 1, "num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64,
                           "num_heads": 2, "num_attention_heads": 2, "out_hidden_size": TINY_HIDDEN}.items():
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
