"""The residual-carry intervention (docs/method.md#residual-carry): scale the skip path of chosen blocks.

Block l computes ``s_l = s_{l-1} + f_l(s_{l-1})``. With carry ``lam`` its output
becomes ``lam * s_{l-1} + (s_l - s_{l-1}) = s_l - (1 - lam) * s_{l-1}``: the
update is kept, the carried state is scaled. ``lam = 1`` is the unmodified
model, ``lam = 0`` removes the skip path (the block's update alone goes on).

The hooks are registered with ``prepend=True`` (docs/capture.md, fact 4), so every later hook sees
the modified output; they do not ``detach``, so gradients flow through them in training.
"""

from __future__ import annotations

import math
import re
import weakref
from dataclasses import fields, is_dataclass

import torch

from effdepth.errors import EffdepthError
from effdepth.models.hooks import HookSet, hidden_from_input, hidden_from_output
from effdepth.models.registry import ResolvedArchitecture

# Blocks that carry a ResidualCarry right now: nesting two would apply the carry twice, silently.
_ACTIVE: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()

_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")


def format_carry(lam: float) -> str:
    """The short form used in folder names and tables.

    >>> format_carry(1.0), format_carry(0.75)
    ('1', '0.75')
    """
    return f"{float(lam):g}"


def parse_carry(values) -> tuple:
    """Carry values from ``"1,0.9,0.5"`` or a sequence of numbers, each checked to lie in [0, 1].

    >>> parse_carry("1,0.75,0.5")
    (1.0, 0.75, 0.5)
    """
    items = [v for v in values.split(",") if v.strip()] if isinstance(values, str) else list(values)
    if not items:
        raise EffdepthError("--carry needs at least one value in [0, 1], e.g. --carry 1,0.9,0.75,0.5")
    out = []
    for item in items:
        lam = check_carry(item)
        if lam in out:
            raise EffdepthError(f"--carry lists {format_carry(lam)} twice; give each value once")
        out.append(lam)
    return tuple(out)


def check_carry(value) -> float:
    """One carry value as a float in [0, 1], or a one-line error.

    >>> check_carry("0.5")
    0.5
    """
    try:
        lam = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise EffdepthError(
            f"carry value {value!r} is not a number; give values in [0, 1], e.g. --carry 1,0.9"
        ) from None
    if not math.isfinite(lam) or not 0.0 <= lam <= 1.0:
        raise EffdepthError(
            f"carry value {value!r} is outside [0, 1]; 1 is the unmodified model, 0 removes the skip path"
        )
    return lam


def check_layer_spec(spec, option: str = "--layers") -> None:
    """Fail on a malformed layer spec before any model is loaded (range is checked later).

    >>> check_layer_spec("1-3,7")
    """
    parse_layers(spec, None, option)


def parse_layers(spec, num_layers: int | None, option: str = "--layers") -> tuple:
    """1-based block indices from ``"all"``, ``"A-B"``, ``"1,3,5"`` (mixable) or a sequence of ints.

    ``num_layers=None`` checks the syntax only; ``"all"`` then gives ``()``.

    >>> parse_layers("all", 4), parse_layers("2-3", 4), parse_layers("1,4", 4)
    ((1, 2, 3, 4), (2, 3), (1, 4))
    """
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "all"):
        return tuple(range(1, num_layers + 1)) if num_layers is not None else ()
    layers = _layer_items(spec, option)
    if not layers:
        raise EffdepthError(f"{option} {spec!r} names no layer; use all, A-B or a comma-separated list such as 1,3,5")
    if num_layers is not None:
        bad = [i for i in layers if not 1 <= i <= num_layers]
        if bad:
            raise EffdepthError(
                f"{option} {spec!r} names layer {bad[0]}, but the model's blocks are numbered 1..{num_layers}"
            )
    return tuple(sorted(set(layers)))


def _layer_items(spec, option: str) -> list:
    if not isinstance(spec, str):
        try:
            items = [int(i) for i in spec]
        except (TypeError, ValueError):
            raise EffdepthError(f"{option} must be all, A-B or a list of block numbers, got {spec!r}") from None
        if any(i != j for i, j in zip(items, spec)):
            raise EffdepthError(f"{option} must hold whole block numbers, got {spec!r}")
        return items
    out = []
    for part in (p.strip() for p in spec.split(",")):
        span = _RANGE.match(part)
        if span:
            lo, hi = int(span.group(1)), int(span.group(2))
            if lo > hi:
                raise EffdepthError(f"{option} range {part!r} runs backwards; write it as {hi}-{lo}")
            out.extend(range(lo, hi + 1))
        elif part.isdigit():
            out.append(int(part))
        else:
            raise EffdepthError(
                f"{option} part {part!r} is not a block number or A-B range (1-based, e.g. 1,3,5 or 2-6 or all)"
            )
    return out


class _CarryHooks(HookSet):
    """What both carries share: ``lam = 1`` registers nothing unless ``hooks_at_one`` (the hooks then
    subtract ``0 * h``: a check that they change nothing themselves); a second carry on a block is refused."""

    def __init__(self, arch: ResolvedArchitecture, lam: float, layers="all", *, hooks_at_one: bool = False):
        self.arch = arch
        self.lam = check_carry(lam)
        self.layers = parse_layers(layers, arch.num_layers)
        # Resolved at once, lam = 1 included: blocks that cannot take a carry (TransformerLens) say so here.
        self._targets = [arch.blocks[layer - 1] for layer in self.layers]
        self.hooks_at_one = bool(hooks_at_one)
        self._blocks: list = []

    def _hooks(self, block: torch.nn.Module) -> list:
        raise NotImplementedError

    def register(self):
        if self.lam == 1.0 and not self.hooks_at_one:
            return
        for layer, block in zip(self.layers, self._targets):
            if block in _ACTIVE:
                raise EffdepthError(f"block {layer} already has a residual carry applied; nesting would apply it twice")
            _ACTIVE.add(block)
            self._blocks.append(block)
            yield from self._hooks(block)

    def released(self) -> None:
        for block in self._blocks:
            _ACTIVE.discard(block)
        self._blocks.clear()


class ResidualCarry(_CarryHooks):
    """Context manager: blocks ``layers`` (1-based) output ``lam * s_{l-1} + (s_l - s_{l-1})``.

    >>> import torch
    >>> from effdepth.models.tiny import tiny_model
    >>> from effdepth.models.registry import resolve_architecture
    >>> m = tiny_model("llama"); ids = torch.tensor([[256, 72, 105]])
    >>> with torch.no_grad(), ResidualCarry(resolve_architecture(m), 0.5, "all"):
    ...     out = m(ids).logits
    >>> bool((out != m(ids).logits).any())
    True
    """

    def _hooks(self, block: torch.nn.Module) -> list:
        return [block.register_forward_hook(self._hook, prepend=True, with_kwargs=True)]

    def _hook(self, module, args, kwargs, output):
        carried = hidden_from_input(args, kwargs)
        produced = hidden_from_output(output, carried)
        # s_l - (1 - lam) s_{l-1}: one fused op, no detach, so gradients flow.
        modified = produced - (1.0 - self.lam) * carried.to(produced.device, produced.dtype)
        return replace_hidden(output, produced, modified)


#: Carry modes of the intervention: the paper's per-sublayer carry, or one carry per block.
CARRY_ON = ("blocks", "sublayers")
# The module whose output a block adds to its residual stream, first present wins: dropouts on the
# branch (Phi-3, GPT-NeoX) come after it, and sandwich-norm blocks (Gemma 2/3, OLMo 2/3) normalise it.
_ATTENTION_OUTPUTS = ("resid_attn_dropout", "post_attention_dropout", "self_attn", "linear_attn", "attn", "attention")
_MLP_OUTPUTS = ("resid_mlp_dropout", "post_mlp_dropout", "post_feedforward_layernorm", "mlp")


def sublayer_branches(block: torch.nn.Module) -> tuple:
    """``(attention branch, MLP branch, parallel)``: the modules whose outputs ``block`` adds to its stream.

    >>> from effdepth.models.tiny import tiny_model
    >>> from effdepth.models.registry import resolve_architecture
    >>> [type(m).__name__ for m in sublayer_branches(resolve_architecture(tiny_model("gemma2")).blocks[0])[:2]]
    ['Gemma2RMSNorm', 'Gemma2RMSNorm']
    """
    children = dict(block.named_children())
    if "post_feedforward_layernorm" in children and "post_attention_layernorm" in children:
        attention = children["post_attention_layernorm"]  # applied to the attention output, before the add
    else:
        attention = next((children[n] for n in _ATTENTION_OUTPUTS if n in children), None)
    mlp = next((children[n] for n in _MLP_OUTPUTS if n in children), None)
    if attention is None or mlp is None:
        raise EffdepthError(
            f"block {type(block).__name__} has no attention and MLP branch effdepth knows "
            "(docs/capture.md); use --carry-on blocks"
        )
    return attention, mlp, bool(getattr(block, "use_parallel_residual", False))


class SublayerCarry(_CarryHooks):
    """Context manager: the paper's carry in every sublayer of blocks ``layers`` (1-based),
    ``h <- lam h + attn(LN h)`` then ``h <- lam h + mlp(LN h)``.

    The hooks subtract ``(1 - lam) h`` from each branch output, h the stream it is added to. A
    parallel-residual block (GPT-NeoX) adds both branches to the same h, so the carry applies once there.

    >>> import torch
    >>> from effdepth.models.tiny import tiny_model
    >>> from effdepth.models.registry import resolve_architecture
    >>> m = tiny_model("llama"); ids = torch.tensor([[256, 72, 105]])
    >>> with torch.no_grad(), SublayerCarry(resolve_architecture(m), 0.5, "all"):
    ...     out = m(ids).logits
    >>> bool((out != m(ids).logits).any())
    True
    """

    def __init__(self, arch: ResolvedArchitecture, lam: float, layers="all", *, hooks_at_one: bool = False):
        super().__init__(arch, lam, layers, hooks_at_one=hooks_at_one)
        self._stream: dict = {}  # block -> the stream its next branch is added to, during a forward pass

    def _hooks(self, block: torch.nn.Module) -> list:
        attention, mlp, parallel = sublayer_branches(block)
        hooks = [
            block.register_forward_pre_hook(
                lambda m, args, kwargs: self._enter_block(block, args, kwargs), prepend=True, with_kwargs=True
            ),
            attention.register_forward_hook(
                lambda m, args, output: self._branch(block, output, keep=not parallel), prepend=True
            ),
        ]
        if not parallel:  # the MLP branch is added to the stream the attention branch left
            hooks.append(
                mlp.register_forward_hook(lambda m, args, output: self._branch(block, output, keep=False), prepend=True)
            )
        return hooks

    def released(self) -> None:
        super().released()
        self._stream.clear()

    def _enter_block(self, block, args, kwargs) -> None:
        self._stream[block] = hidden_from_input(args, kwargs)

    def _branch(self, block, output, keep: bool):
        stream = self._stream.pop(block)
        produced = hidden_from_output(output, stream)
        modified = produced - (1.0 - self.lam) * stream.to(produced.device, produced.dtype)
        if keep:  # the MLP branch is added to the stream after this one
            self._stream[block] = stream + modified
        return replace_hidden(output, produced, modified)


def carry_hooks(arch: ResolvedArchitecture, lam: float, layers="all", on: str = "blocks"):
    """The context manager of a carry ``on`` blocks (:class:`ResidualCarry`) or sublayers (:class:`SublayerCarry`)."""
    check_carry_on(on)
    return (SublayerCarry if on == "sublayers" else ResidualCarry)(arch, lam, layers)


def check_carry_on(on: str) -> str:
    """A one-line error unless ``on`` is one of :data:`CARRY_ON`."""
    if on not in CARRY_ON:
        raise EffdepthError(
            f"--carry-on {on!r}: use blocks (one carry per block) or sublayers (the paper's, in "
            "every attention and MLP sublayer)"
        )
    return on


def replace_hidden(output, old: torch.Tensor, new: torch.Tensor):
    """``output`` (a tensor, tuple, list, dict or ``ModelOutput``) with the tensor ``old`` replaced by ``new``.

    >>> a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    >>> replace_hidden((a, b), a, c)[0] is c
    True
    """
    if output is old:
        return new
    if isinstance(output, tuple) and hasattr(output, "_fields"):
        for name in output._fields:
            if getattr(output, name) is old:
                return output._replace(**{name: new})
    elif isinstance(output, tuple):
        return tuple(new if item is old else item for item in output)
    if isinstance(output, list):
        return [new if item is old else item for item in output]
    if isinstance(output, dict):
        # ModelOutput is an ordered dict whose keys mirror its attributes.
        for key, value in list(output.items()):
            if value is old:
                output[key] = new
                if hasattr(output, key):
                    setattr(output, key, new)
                return output
    for name in _attribute_names(output):
        if getattr(output, name, None) is old:
            setattr(output, name, new)
            return output
    raise RuntimeError(f"could not replace the hidden state in a block output of type {type(output).__name__}")


def _attribute_names(output) -> list:
    if is_dataclass(output):
        return [f.name for f in fields(output)]
    return ["last_hidden_state", "hidden_states"]
