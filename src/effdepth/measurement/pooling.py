"""Passages -> samples: one forward pass per batch, each layer pooled by a hook as it is produced, into a store.

The hook on block l hands its output to the reduction's pooler and returns, so memory holds one layer's
float64 copy (and the previous one) at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from effdepth.errors import EffdepthError
from effdepth.measurement.devices import forward_error, input_device, is_out_of_memory
from effdepth.measurement.forward import decoder_forward
from effdepth.models.hooks import HookSet, hidden_from_input, hidden_from_output

STATES = ("blocks", "hidden")


class PoolingCapture(HookSet):
    """Context manager: hooks that pool S_0 (the input of block 1) and every block's output.

    >>> from effdepth.models.tiny import tiny_model
    >>> from effdepth.models.registry import resolve_architecture
    >>> lm = tiny_model("llama"); arch = resolve_architecture(lm)
    >>> from effdepth.numerics.pooling import PassagePooler
    >>> pooler = PassagePooler(["default"], arch.num_layers)
    >>> pooler.start(torch.ones(2, 5), torch.tensor([False, False]))
    >>> with PoolingCapture(arch, pooler), torch.inference_mode():
    ...     _ = lm(torch.zeros(2, 5, dtype=torch.long))
    >>> tuple(pooler.pooled.shape)
    (1, 4, 2, 64)
    """

    def __init__(self, arch, pooler, states: str = "blocks"):
        if states not in STATES:
            raise EffdepthError(f"--states must be one of {', '.join(STATES)}, got {states!r}")
        if states == "hidden" and arch.final_norm is None:
            raise EffdepthError(
                "--states hidden applies the model's final norm to the last state, and this "
                "architecture names none; use --states blocks"
            )
        self.arch, self.pooler, self.states = arch, pooler, states
        self._input = None

    def register(self):
        yield self.arch.blocks[0].register_forward_pre_hook(self._on_input, with_kwargs=True)
        for layer, block in enumerate(self.arch.blocks, start=1):
            yield block.register_forward_hook(self._output_hook(layer))

    def released(self) -> None:
        self.pooler.finish()

    def _on_input(self, module, args, kwargs):
        self._input = hidden_from_input(args, kwargs)
        self.pooler.layer(0, self._input)

    def _output_hook(self, layer: int):
        last = layer == self.arch.num_layers

        def hook(module, args, output):
            h = hidden_from_output(output, self._input)
            if last and self.states == "hidden":
                h = self.arch.final_norm(h)
            self.pooler.layer(layer, h)

        return hook


@dataclass(frozen=True)
class PassageForward:
    """How the forward passes over passages run: passages per batch, which states, the padding id."""

    batch_size: int
    states: str = "blocks"
    pad_id: int = 0
    progress: bool = True
    dtype: str | None = None

    @classmethod
    def of(cls, lm, analysis, progress: bool) -> "PassageForward":
        """The forward passes of a loaded model under :class:`~effdepth.options.AnalysisOptions`."""
        return cls(analysis.batch_size, analysis.states, pad_id(lm), progress, lm.info.get("dtype"))


def pad_id(lm) -> int:
    """The id padding takes: the tokenizer's pad token, else its end of sequence, else 0."""
    tok = getattr(lm, "tokenizer", None)
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tok, name, None)
        if isinstance(value, int):
            return value
    return 0


def pool_into(store, batches, *, dtype: str | None = None, rows: dict | None = None, after_batch=None) -> None:
    """Write every batch of samples into ``store`` once :func:`check_finite` (``dtype``: the model's) passes it,
    each passage at its index or at ``rows[index]`` (a torchrun rank's shard); ``after_batch()`` returning true
    stops the loop."""
    for indices, samples, sums in batches:
        check_finite(samples, indices, dtype)
        store.write(indices if rows is None else [rows[i] for i in indices], samples, sums)
        if after_batch is not None and after_batch():
            return


def given_batches(states: torch.Tensor, mask: torch.Tensor, pooler, first: int):
    """Yield states a user gives, ``(L+1, B, T, d)`` with ``mask`` (B, T), as one batch pooled as the hooks pool."""
    indices = list(range(first, first + int(states.shape[1])))
    pooler.start(mask.to(states.device), torch.zeros(len(indices), dtype=torch.bool), indices)
    for layer in range(states.shape[0]):
        pooler.layer(layer, states[layer])
    pooler.finish()
    yield indices, pooler.output(), pooler.sums.cpu()


def pooled_batches(
    model,
    arch,
    passages,
    order,
    pooler,
    forward: PassageForward,
    *,
    start: int = 0,
    facts: dict | None = None,
):
    """Yield ``(indices, samples, sums)`` per forward pass over the passages ``order[start:]``, on the CPU.

    Out of memory in a batch halves the batch size and retries it (pooling is per passage, so no number
    changes); ``facts`` records the batch size used and the retries.
    """
    facts = facts if facts is not None else {}
    device = input_device(arch, model)
    lengths = passages.lengths
    size, states = forward.batch_size, forward.states
    hooked = callable(getattr(arch, "run", None))  # TransformerLens: its own hooks and forward pass
    total = int(lengths[list(order)].sum())
    done = int(lengths[list(order[:start])].sum())
    with tqdm(
        total=total,
        initial=done,
        unit="tok",
        desc="measuring passages",
        disable=not forward.progress,
        dynamic_ncols=True,
        leave=False,
    ) as bar:
        i = start
        while i < len(order):
            indices = list(order[i : i + size])
            ids, mask = passages.batch(indices, pad_id=forward.pad_id)
            ids, mask = ids.to(device), mask.to(device)
            try:
                pooler.start(mask, torch.from_numpy(passages.starts_with_bos[indices]), indices)
                if hooked:
                    _pool_external(arch, pooler, ids, mask, states)
                else:
                    with PoolingCapture(arch, pooler, states):
                        decoder_forward(model, arch, ids, mask)
                pooled, sums = pooler.output(), pooler.sums.cpu()
            except EffdepthError:
                raise
            except (IndexError, RuntimeError) as exc:
                if not is_out_of_memory(exc):
                    raise EffdepthError(forward_error(exc, ids)) from None
                if size == 1:
                    raise EffdepthError(
                        f"out of memory on a single passage of {ids.shape[1]} tokens; lower --seq-len, "
                        "use --dtype bfloat16, or spread the model with --device-map auto"
                    ) from None
                size = max(1, size // 2)
                facts["oom_retries"] = facts.get("oom_retries", 0) + 1
                facts["batch_size_used"] = size
                pooler.reset()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                continue
            yield indices, pooled, sums
            bar.update(int(lengths[indices].sum()))
            i += len(indices)


def _pool_external(arch, pooler, ids: torch.Tensor, mask: torch.Tensor, states: str) -> None:
    """An architecture that runs through its own hooks (TransformerLens) fills a buffer of all states: pool it."""
    if states == "hidden":
        raise EffdepthError(
            "--states hidden needs a Hugging Face model; TransformerLens models are measured with --states blocks"
        )
    with arch.capture() as capture:
        arch.run(ids, mask)
        for layer in range(capture.states.shape[0]):
            pooler.layer(layer, capture.states[layer])
    pooler.finish()


def check_finite(samples: dict, indices, dtype: str | None) -> None:
    """One line for non-finite states in a batch's ``samples`` ``{variant: (L+1, s, d)}``."""
    finite = torch.stack([torch.isfinite(x.reshape(x.shape[0], -1)).all(dim=1) for x in samples.values()])
    if bool(finite.all()):
        return
    layer = int(torch.nonzero(~finite.all(dim=0))[0])
    hint = " (float16 overflows on massive activations: use --dtype bfloat16 or float32)" if dtype == "float16" else ""
    shown = ", ".join(str(int(i)) for i in list(indices)[:4]) + (", ..." if len(indices) > 4 else "")
    raise EffdepthError(
        f"non-finite states at layer {layer} (S_{layer}, model dtype {dtype}) in passages {shown}: the model "
        f"overflowed or was given non-finite weights{hint}"
    )
