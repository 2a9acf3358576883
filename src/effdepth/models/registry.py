"""Where each architecture keeps its decoder blocks, embedding and final norm.

Paths are attribute paths from the loaded model (see ``docs/capture.md``); a model loaded as its base
class (e.g. ``LlamaModel``) is resolved by each path with its leading components removed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from effdepth.errors import EffdepthError, spelled


@dataclass(frozen=True)
class Architecture:
    """Module paths of one family. ``decoder`` runs the blocks without the LM head."""

    decoder: str
    blocks: str
    embedding: str
    final_norm: str | None


_LLAMA_LIKE = Architecture("model", "model.layers", "model.embed_tokens", "model.norm")
_VL_WRAPPER = Architecture(
    "model.language_model",
    "model.language_model.layers",
    "model.language_model.embed_tokens",
    "model.language_model.norm",
)

ARCHITECTURES: dict = {
    "gpt2": Architecture("transformer", "transformer.h", "transformer.wte", "transformer.ln_f"),
    "gpt_neox": Architecture("gpt_neox", "gpt_neox.layers", "gpt_neox.embed_in", "gpt_neox.final_layer_norm"),
    **dict.fromkeys(
        "llama mistral phi3 qwen2 qwen3 olmo olmo2 olmo3 gemma gemma2 gemma3_text qwen3_5_text".split(), _LLAMA_LIKE
    ),
    "qwen3_5": _VL_WRAPPER,
    "gemma3": _VL_WRAPPER,
}

# Families with hidden states but no residual stream of transformer blocks.
NOT_RESIDUAL = {"mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm"}


@dataclass
class ResolvedArchitecture:
    """The modules of one loaded model, found through the registry or overrides."""

    model_type: str
    decoder: nn.Module | None
    blocks: nn.ModuleList
    embedding: nn.Module | None
    final_norm: nn.Module | None
    paths: dict

    @property
    def num_layers(self) -> int:
        return len(self.blocks)


def supported_model_types() -> list:
    return sorted(ARCHITECTURES)


def resolve_architecture(
    model: nn.Module, *, blocks_path: str | None = None, embedding_path: str | None = None
) -> ResolvedArchitecture:
    """Find the decoder blocks of ``model`` from the registry, or from explicit paths.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50))
    >>> resolve_architecture(m).num_layers
    2
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", type(model).__name__)
    if blocks_path:
        blocks = _get(model, blocks_path)
        if blocks is None:
            raise EffdepthError(f"--blocks-path {blocks_path!r} does not name a module of {type(model).__name__}")
        if not isinstance(blocks, (nn.ModuleList, nn.Sequential)) or len(blocks) == 0:
            raise EffdepthError(
                f"--blocks-path {blocks_path!r} is a {type(blocks).__name__}, not a non-empty list of blocks"
            )
        embedding = _get(model, embedding_path) if embedding_path else None
        if embedding_path and embedding is None:
            raise EffdepthError(f"--embedding-path {embedding_path!r} does not name a module of {type(model).__name__}")
        return ResolvedArchitecture(
            model_type,
            None,
            blocks,
            embedding,
            None,
            {"blocks": blocks_path, "embedding": embedding_path, "source": "override"},
        )
    if model_type in NOT_RESIDUAL:
        raise EffdepthError(
            f"model type {model_type!r} is not a transformer with a residual stream of blocks, which D_eff measures; "
            f"supported: {', '.join(supported_model_types())}"
        )
    arch = ARCHITECTURES.get(model_type)
    if arch is None:
        raise EffdepthError(
            f"model type {model_type!r} is not in the architecture registry (supported: {', '.join(supported_model_types())}); "
            f"if it is a decoder with residual blocks, name them with {spelled('--blocks-path', 'blocks_path=')} "
            f"(e.g. model.layers) and optionally {spelled('--embedding-path', 'embedding_path=')}"
        )
    for strip in range(arch.blocks.count(".") + 1):
        blocks = _get(model, _strip(arch.blocks, strip))
        if isinstance(blocks, nn.ModuleList) and len(blocks) > 0:
            paths = {
                "decoder": _strip(arch.decoder, strip),
                "blocks": _strip(arch.blocks, strip),
                "embedding": _strip(arch.embedding, strip),
                "final_norm": _strip(arch.final_norm, strip) if arch.final_norm else None,
                "source": "registry",
            }
            return ResolvedArchitecture(
                model_type,
                _get(model, paths["decoder"]) if paths["decoder"] else model,
                blocks,
                _get(model, paths["embedding"]),
                _get(model, paths["final_norm"]) if paths["final_norm"] else None,
                paths,
            )
    raise EffdepthError(
        f"{type(model).__name__} (model type {model_type!r}) has no blocks at {arch.blocks!r}; "
        "name them with --blocks-path"
    )


def _strip(path: str, n: int) -> str:
    return ".".join(path.split(".")[n:])


def _get(root: nn.Module, path: str | None):
    if path == "":
        return root
    obj = root
    for name in (path or "").split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj
