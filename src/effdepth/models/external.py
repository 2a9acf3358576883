"""Model objects of other libraries, recognised by their class's module (``pip install effdepth[lens]``).

An nnsight object is unwrapped and measured like its Hugging Face module. A TransformerLens model is read
through its hook points (S_0 ``blocks.0.hook_resid_pre``, S_l ``blocks.{l-1}.hook_resid_post``); centred
writing weights change the stream, so such a model is refused unless ``allow_processed=True``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import torch

from effdepth.errors import EffdepthError
from effdepth.models.hooks import ResidualCapture
from effdepth.models.registry import ResolvedArchitecture
from effdepth.results.provenance import package_version

TRANSFORMER_LENS = "transformer_lens"
NNSIGHT = "nnsight"
_DISTRIBUTIONS = {TRANSFORMER_LENS: "transformer-lens", NNSIGHT: "nnsight"}
TL_MODELS = ("HookedTransformer", "TransformerBridge")

# Row means in units of random rows' (|mean| / rms * sqrt(n): about 0.67 random, below ~0.01 centred).
CENTRED_BELOW = 0.05
_CHECK_ROWS = 4096

UNPROCESSED_HOW = (
    "load it unprocessed with HookedTransformer.from_pretrained_no_processing(...) "
    "(TransformerBridge: boot_transformers(...) without enable_compatibility_mode()), "
    "or pass allow_processed=True to measure the processed stream anyway"
)


def library_of(obj) -> str | None:
    """``"transformer_lens"``, ``"nnsight"`` or ``None``, from the modules of ``obj``'s classes (nothing imported).

    >>> import torch
    >>> library_of(torch.nn.Linear(2, 2)) is None
    True
    """
    for cls in type(obj).__mro__:
        root = (getattr(cls, "__module__", None) or "").split(".")[0]
        if root in (TRANSFORMER_LENS, NNSIGHT):
            return root
    return None


@dataclass
class External:
    """What effdepth needs from another library's model object; ``architecture`` is TransformerLens's only."""

    library: str
    model: torch.nn.Module
    tokenizer: object | None
    info: dict = field(default_factory=dict)
    architecture: "HookedArchitecture | None" = None

    def loaded(self, *, dtype=None, device=None):
        """A :class:`~effdepth.models.loading.LoadedModel` for ``measure`` (TransformerLens only)."""
        from effdepth.models.loading import LoadedModel, resolve_device, resolve_dtype

        m = self.model
        if dtype is not None:
            m.to(resolve_dtype(dtype, resolve_device(device)))
        if device is not None:
            m.to(resolve_device(device))
        m.eval()
        param = next(m.parameters())
        info = {**self.info, "dtype": str(param.dtype).replace("torch.", ""), "device": str(param.device)}
        return LoadedModel(m, self.tokenizer, info)


def adapt_external(obj, *, allow_processed: bool = False) -> External | None:
    """Unwrap an nnsight object or check a TransformerLens model; ``None`` for anything else.

    >>> adapt_external("EleutherAI/pythia-70m") is None
    True
    """
    library = library_of(obj)
    if library == NNSIGHT:
        return _nnsight(obj, allow_processed)
    if library == TRANSFORMER_LENS:
        return _transformer_lens(obj, allow_processed)
    return None


def _version(library: str) -> str | None:
    module = sys.modules.get(library)
    version = getattr(module, "__version__", None)
    return str(version) if version else package_version(_DISTRIBUTIONS[library])


# -- nnsight ---------------------------------------------------------------------------


def _nnsight(obj, allow_processed: bool) -> External:
    name = type(obj).__name__
    dispatched_here = False
    if getattr(obj, "dispatched", True) is False and callable(getattr(obj, "dispatch", None)):
        obj.dispatch()  # real weights instead of meta tensors, as nnsight's first trace would load
        dispatched_here = True
    state = vars(obj)
    module = next((state[k] for k in ("_module", "_model") if isinstance(state.get(k), torch.nn.Module)), None)
    if module is None:
        raise EffdepthError(
            f"found no torch module inside this nnsight {name} (looked for ._module and ._model); "
            "pass the Hugging Face model it wraps instead"
        )
    wrapper = {
        "wrapper": f"nnsight.{name}",
        "wrapper_version": _version(NNSIGHT),
        "dispatched_by_effdepth": dispatched_here,
    }
    if library_of(module) == TRANSFORMER_LENS:  # nnsight around a TransformerLens model
        inner = _transformer_lens(module, allow_processed)
        inner.info.update(wrapper)
        return inner
    tokenizer = state.get("tokenizer")
    if tokenizer is None:
        try:
            tokenizer = getattr(obj, "tokenizer", None)
        except Exception:  # an envoy may resolve unknown names against the module tree
            tokenizer = None
    return External(NNSIGHT, module, tokenizer, wrapper)


# -- TransformerLens --------------------------------------------------------------------


@dataclass
class HookedArchitecture(ResolvedArchitecture):
    """A TransformerLens model: S_0..S_L come from its own hook points and forward pass.

    ``blocks`` refuses item access: hooks on a block fire after ``hook_resid_post`` (inside the block),
    so an intervention would go unseen.
    """

    model: torch.nn.Module | None = None
    hook_names: tuple = ()

    def capture(self) -> "HookPointCapture":
        return HookPointCapture(self)

    def run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *, logits: bool = False):
        """One forward pass; returns the logits when ``logits`` (else stops after the last block)."""
        kwargs = {}
        if attention_mask is not None and not bool(attention_mask.all()):
            kwargs["attention_mask"] = attention_mask
        with torch.inference_mode():
            if logits:
                return self.model(input_ids, return_type="logits", **kwargs)
            self.model(input_ids, return_type=None, stop_at_layer=self.num_layers, **kwargs)
            return None


class _NoInterventionBlocks:
    """The blocks of a TransformerLens model: counted, but not handed to interventions."""

    def __init__(self, blocks):
        self._blocks = blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def __getitem__(self, index):
        raise EffdepthError(
            "residual-carry interventions are not supported on TransformerLens models (their hook points fire "
            "inside the blocks, before a carry could change a block's output); intervene on the Hugging Face model instead"
        )


class _HooksContext:
    """A TransformerLens ``model.hooks(...)`` context, closed like a hook handle."""

    def __init__(self, context):
        self._context = context
        context.__enter__()

    def remove(self) -> None:
        context, self._context = self._context, None
        if context is not None:
            context.__exit__(None, None, None)


class HookPointCapture(ResidualCapture):
    """:class:`~effdepth.models.hooks.ResidualCapture` fed by TransformerLens hook points."""

    def register(self):
        first, *rest = self.arch.hook_names
        hooks = [(first, lambda x, hook: self._on_input(None, (x,), {}))]
        for layer, name in enumerate(rest, start=1):
            hooks.append((name, self._hook_output(layer)))
        yield _HooksContext(self.arch.model.hooks(fwd_hooks=hooks))

    def _hook_output(self, layer: int):
        store = self._make_output_hook(layer)
        return lambda x, hook: store(None, None, x)


def _transformer_lens(model, allow_processed: bool) -> External:
    name = type(model).__name__
    kinds = {cls.__name__ for cls in type(model).__mro__}
    if not kinds & set(TL_MODELS) or not callable(getattr(model, "hooks", None)):
        raise EffdepthError(
            f"TransformerLens {name} is not a decoder effdepth can measure; pass a HookedTransformer or a TransformerBridge"
        )
    cfg = model.cfg
    blocks = getattr(model, "blocks", None)
    if blocks is None or len(blocks) == 0:
        raise EffdepthError(
            f"this TransformerLens {name} has no blocks list (encoder-decoder or custom stack); D_eff needs one residual stream of blocks"
        )
    names = ("blocks.0.hook_resid_pre",) + tuple(f"blocks.{i}.hook_resid_post" for i in range(len(blocks)))
    available = set(model.hook_dict)
    missing = [n for n in names if n not in available]
    if missing:
        raise EffdepthError(
            f"this TransformerLens {name} has no hook point {missing[0]}; D_eff needs blocks.0.hook_resid_pre and every blocks.N.hook_resid_post"
        )
    processing = weight_processing(model)
    if processing["stream_changed"] and not allow_processed:
        raise EffdepthError(f"this TransformerLens {name} {processing['detected']}; {UNPROCESSED_HOW}")
    arch = HookedArchitecture(
        model_type=f"transformer_lens:{getattr(cfg, 'original_architecture', None) or name}",
        decoder=None,
        blocks=_NoInterventionBlocks(blocks),
        embedding=getattr(model, "embed", None),
        final_norm=getattr(model, "ln_final", None),
        paths={
            "blocks": "blocks",
            "embedding": "embed",
            "hooks": "blocks.0.hook_resid_pre, blocks.{l-1}.hook_resid_post",
            "source": "transformer_lens",
        },
        model=model,
        hook_names=names,
    )
    info = {
        "id": getattr(cfg, "model_name", None) or name,
        "source": "object",
        "revision": None,
        "library": TRANSFORMER_LENS,
        "library_version": _version(TRANSFORMER_LENS),
        "class": name,
        "model_type": arch.model_type,
        "num_layers": len(blocks),
        "hidden_size": getattr(cfg, "d_model", None),
        "vocab_size": getattr(cfg, "d_vocab", None),
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "weight_processing": processing,
    }
    return External(TRANSFORMER_LENS, model, getattr(model, "tokenizer", None), info, arch)


def weight_processing(model) -> dict:
    """What TransformerLens did to the weights of ``model``, as far as can be told.

    Folding is recorded; centring is not, so it is read from the weights (rows of ``W_E`` and ``W_U``).
    ``stream_changed``: the writing weights are centred, or processed and ``W_E`` could not be read.

    >>> import types
    >>> folded = types.SimpleNamespace(cfg=types.SimpleNamespace(normalization_type="RMSPre"), W_E=torch.randn(10, 8))
    >>> p = weight_processing(folded)
    >>> p["fold_ln"], p["center_writing_weights"], p["stream_changed"]
    (True, False, False)
    """
    cfg = model.cfg
    norm = getattr(cfg, "normalization_type", None)
    bridge_processed = bool(getattr(model, "_weights_processed", False))
    centred = _centred(_weight(model, "W_E"))
    out = {
        "fold_ln": True if norm in ("LNPre", "RMSPre") else (None if bridge_processed else False),
        "center_writing_weights": centred,
        "center_unembed": _centred(_weight(model, "W_U")),
        "process_weights": bridge_processed,
        "compatibility_mode": bool(getattr(model, "compatibility_mode", False)),
        "normalization_type": norm,
        "default_prepend_bos": getattr(cfg, "default_prepend_bos", None),
    }
    recorded = out["fold_ln"] is not False or bridge_processed
    out["stream_changed"] = bool(centred) or (centred is None and recorded)
    if centred:
        out["detected"] = (
            "has centred writing weights (center_writing_weights, the default of HookedTransformer.from_pretrained and "
            "enable_compatibility_mode), which removes each token's mean across the residual dimensions, so its "
            "residual stream is not the model's own"
        )
    elif out["stream_changed"]:
        out["detected"] = (
            "has processed weights whose embedding could not be checked for centring, so its residual stream may not be the model's own"
        )
    return out


def _weight(model, name: str) -> torch.Tensor | None:
    try:
        w = getattr(model, name)
    except Exception:  # properties of partly built or offloaded models can raise anything
        return None
    return w if isinstance(w, torch.Tensor) and w.dim() == 2 and w.device.type != "meta" else None


def _centred(w: torch.Tensor | None) -> bool | None:
    """Whether the rows of ``w`` have mean zero, to rounding (``None``: cannot tell).

    >>> w = torch.randn(50, 32)
    >>> _centred(w), _centred(w - w.mean(-1, keepdim=True)), _centred(None)
    (False, True, None)
    """
    if w is None:
        return None
    w = w.detach()
    if w.shape[0] > _CHECK_ROWS:  # evenly spaced rows are enough, and keep the check cheap
        w = w[torch.linspace(0, w.shape[0] - 1, _CHECK_ROWS, device=w.device).long()]
    w = w.double()
    rms = w.pow(2).mean(-1).sqrt()
    keep = rms > 0
    if not bool(keep.any()) or w.shape[-1] < 2:
        return None
    ratio = w.mean(-1)[keep].abs() / rms[keep] * math.sqrt(w.shape[-1])
    return bool(ratio.median() < CENTRED_BELOW)
