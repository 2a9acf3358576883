"""D_eff from what you already hold: the model object in your own loop, its states, or pooled vectors."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch

from effdepth.errors import EffdepthError
from effdepth.measurement.pooling import given_batches, pool_into
from effdepth.measurement.run import HIDDEN_MEANING, analysed_result
from effdepth.models.external import TRANSFORMER_LENS, adapt_external
from effdepth.models.hooks import ResidualCapture
from effdepth.models.registry import resolve_architecture
from effdepth.options import AnalysisOptions
from effdepth.results.provenance import provenance_record
from effdepth.results.result import Result

CAPTURE_HOW = "with effdepth.capture(model) as states: model(ids)"


class CapturedStates(Sequence):
    """S_0..S_L of the latest forward pass inside :func:`capture`.

    ``states[l]`` is S_l, ``(batch, seq, d)``; ``states.tensor`` all of them, detached. The buffer is
    reused by the next forward pass of the same shape: ``clone()`` what you want to keep.
    """

    def __init__(self, capture: ResidualCapture, num_layers: int, info: dict):
        self._capture = capture
        self.num_layers = num_layers
        self.info = info

    @property
    def tensor(self) -> torch.Tensor:
        if self._capture.states is None:
            raise EffdepthError(
                f"no forward pass has run inside the capture yet; call the model inside the block: {CAPTURE_HOW}"
            )
        return self._capture.states

    def __len__(self) -> int:
        return self.num_layers + 1

    def __getitem__(self, index):
        return self.tensor[index]

    def __repr__(self) -> str:
        shape = "empty" if self._capture.states is None else "x".join(map(str, self._capture.states.shape[1:]))
        return f"CapturedStates(S_0..S_{self.num_layers}, {shape})"


@contextlib.contextmanager
def capture(model, *, allow_processed: bool = False):
    """Capture the residual stream S_0..S_L (before the final norm) of every forward pass run inside the block.

    ``model``: a Hugging Face causal LM, an nnsight or a TransformerLens model. States hold the latest
    batch only; gradients are untouched.

    >>> import effdepth, torch
    >>> from effdepth.models.tiny import tiny_model
    >>> model = tiny_model("llama")
    >>> with effdepth.capture(model) as states:
    ...     logits = model(torch.randint(0, 256, (2, 8))).logits
    >>> len(states), tuple(states[0].shape)
    (4, (2, 8, 64))
    """
    external = adapt_external(model, allow_processed=allow_processed)
    if external is not None and external.architecture is not None:
        arch, info = external.architecture, external.info
        recorder = arch.capture()
    else:
        module = external.model if external is not None else model
        arch = resolve_architecture(module)
        info = _model_record(module, arch, external)
        recorder = ResidualCapture(arch)
    with recorder:
        yield CapturedStates(recorder, arch.num_layers, {"source": "capture", **info})


class Accumulator:
    """D_eff from batches of states you feed it: your loop, effdepth's statistics.

    ``update(states, mask=None)`` takes what :func:`capture` yields, a ``(L+1, batch, seq, d)`` tensor, or
    a list of L+1 ``(batch, seq, d)`` (or ``(seq, d)``) tensors, each row a passage; ``mask`` ``(batch,
    seq)`` marks real tokens. ``result()`` is :func:`effdepth.measure`'s result over the same passages and
    options; ``reset()`` starts over.

    >>> import effdepth, torch
    >>> from effdepth.models.tiny import tiny_model
    >>> model, acc = tiny_model("gpt2"), effdepth.Accumulator(bootstrap=0)
    >>> with effdepth.capture(model) as states, torch.no_grad():
    ...     for _ in range(3):
    ...         _ = model(torch.randint(0, 256, (2, 8)))
    ...         acc.update(states)
    >>> r = acc.result()
    >>> r.passages, r.default.sequences, r.default.reference
    (True, 6, 1.5)
    """

    def __init__(
        self,
        views=("default",),
        similarity=None,
        *,
        pooling: str = "mean",
        tokens_per_passage: int | None = None,
        include_embedding: bool = False,
        bootstrap: int = AnalysisOptions.bootstrap,
        seed: int = 0,
    ):
        options = {
            "views": views,
            "similarity": similarity,
            "pooling": pooling,
            "tokens_per_passage": tokens_per_passage,
            "include_embedding": include_embedding,
            "seed": seed,
            "bootstrap": bootstrap,
        }
        self.analysis = AnalysisOptions(**{k: v for k, v in options.items() if v is not None})
        self.views = self.analysis.view_specs
        bos = [v.name for v in self.views if v.has("drop-bos")]
        if bos:
            raise EffdepthError(
                f"view {bos[0]} needs to know which passages start with BOS, and states do not say; use "
                "drop-pos0 (position 0 left out, whatever it holds) or effdepth.measure"
            )
        self.reduction = self.analysis.reduction
        self.variants = self.reduction.variants(self.views)
        self.reset()

    def reset(self) -> None:
        """Forget every batch (the views and options stay)."""
        self._kept = KeptSamples()
        self._lengths: list = []
        self.num_layers: int | None = None
        self._model: dict | None = None

    @property
    def sequences(self) -> int:
        """Passages (sequences) fed so far."""
        return int(sum(len(n) for n in self._lengths))

    @property
    def tokens(self) -> int:
        return int(sum(n.sum() for n in self._lengths))

    def update(self, states, mask=None) -> None:
        """Add one batch of states; nothing of it is kept but its samples (pooled vectors, or sampled tokens)."""
        s = self._checked(states)
        if isinstance(states, CapturedStates) and self._model is None:
            self._model = states.info
        real = torch.ones(s.shape[1:3], dtype=torch.bool) if mask is None else _mask(mask, s)
        lengths = real.sum(dim=1)
        if bool((lengths == 0).any()):
            raise EffdepthError(
                f"passage {int(torch.nonzero(lengths == 0)[0])} of this batch has no real token by its "
                "mask; leave it out, or mark its tokens with True/1"
            )
        pooler = self.reduction.pooler(self.variants, self.num_layers)
        pool_into(
            self._kept, given_batches(s, real, pooler, first=self.sequences), dtype=str(s.dtype).removeprefix("torch.")
        )
        self._lengths.append(lengths.cpu().numpy().astype(np.int64))

    def _checked(self, states) -> torch.Tensor:
        """The states as ``(L+1, batch, seq, d)``, with as many states as the earlier batches."""
        s = state_batch(states)
        if self.num_layers is None:
            self.num_layers = int(s.shape[0]) - 1
        elif s.shape[0] - 1 != self.num_layers:
            raise EffdepthError(
                f"this batch has {s.shape[0]} states but earlier ones had {self.num_layers + 1}; one Accumulator per model (reset() to start over)"
            )
        return s

    def result(
        self, views=None, similarity: str | None = None, *, bootstrap: int | None = None, seed: int | None = None
    ) -> Result:
        """The Result of every batch so far; ``views`` (a subset of those accumulated) default to the Accumulator's."""
        if self.sequences == 0:
            raise EffdepthError("the Accumulator has no states yet; call update(states) with at least one batch first")
        changes = {
            k: v for k, v in {"similarity": similarity, "bootstrap": bootstrap, "seed": seed}.items() if v is not None
        }
        if views is not None:
            wanted = [v.name for v in replace(self.analysis, views=views).view_specs]
            have = [v.name for v in self.views]
            missing = [w for w in wanted if w not in have]
            if missing:
                raise EffdepthError(
                    f"view {missing[0]!r} was not accumulated (have {', '.join(have)}); name it when creating the Accumulator: Accumulator(views=...)"
                )
            changes["views"] = tuple(wanted)
        analysis = replace(self.analysis, **changes)
        lengths = np.concatenate(self._lengths)
        result = analysed_result(
            {v: np.concatenate([batch[v] for batch in self._kept.batches], axis=1) for v in self.variants},
            analysis,
            token_sums=np.concatenate(self._kept.sums, axis=1).transpose(1, 0, 2),
            lengths=lengths,
            seq_len=int(lengths.max()),
            progress=False,
            offsets=self.reduction.offsets(lengths, np.zeros(len(lengths), dtype=bool), self.variants),
        )
        result.config.update(
            {
                "pooling": analysis.pooling,
                "num_layers": self.num_layers,
                "num_passages": len(lengths),
                "num_seqs": len(lengths),
                "seq_len": int(lengths.max()),
                "mean_passage_tokens": round(float(lengths.mean()), 2),
                "states": "blocks",
                "given": "states (effdepth.Accumulator)",
            }
        )
        result.provenance = provenance_record(
            model=self._model or {"source": "states"}, tokens_measured=int(lengths.sum())
        )
        return result


class KeptSamples:
    """The Accumulator's store: what ``pool_into`` writes, kept in memory (float32, as measure's store on disk)."""

    def __init__(self):
        self.batches: list = []
        self.sums: list = []

    def write(self, indices, samples: dict, sums) -> None:
        self.batches.append({v: np.asarray(x, dtype=np.float32) for v, x in samples.items()})
        self.sums.append(np.asarray(sums, dtype=np.float64))


def from_hidden_states(
    hidden_states,
    attention_mask=None,
    *,
    model=None,
    bootstrap: int = AnalysisOptions.bootstrap,
    **options,
) -> Result:
    """D_eff from the ``hidden_states`` tuple of ``model(..., output_hidden_states=True)``, each row a passage;
    ``options`` are the :class:`Accumulator`'s.

    Its last entry is the final norm's output, not S_L; taken as the paper takes it, it gives
    ``effdepth.measure(..., states="hidden")``'s number over the same passages (``config["hidden_states"]``
    says so). ``model=`` checks the tuple's length and names the model; ``attention_mask`` marks real
    tokens. For the states before the final norm: ``with effdepth.capture(model) as states: model(ids)``.

    >>> import effdepth, torch
    >>> from effdepth.models.tiny import tiny_model
    >>> model = tiny_model("llama")
    >>> out = model(torch.randint(0, 256, (6, 8)), output_hidden_states=True)
    >>> r = effdepth.from_hidden_states(out.hidden_states, model=model, bootstrap=0)
    >>> r.config["num_layers"], r.config["states"], r.config["hidden_states"]["same_as"]
    (3, 'hidden', "effdepth.measure(..., states='hidden') over the same passages")
    """
    hidden = getattr(hidden_states, "hidden_states", hidden_states)
    if not isinstance(hidden, (tuple, list)) or not all(isinstance(h, torch.Tensor) for h in hidden) or len(hidden) < 2:
        raise EffdepthError(
            "hidden_states must be the tuple of L+1 tensors from model(..., output_hidden_states=True); "
            "for a (L+1, batch, seq, d) tensor of residual states use effdepth.from_states"
        )
    if model is not None:
        module, arch, external = _hidden_states_model(model)
        if len(hidden) != arch.num_layers + 1:
            raise EffdepthError(
                f"got {len(hidden)} hidden states, but this {arch.model_type} model has {arch.num_layers} "
                f"blocks, so output_hidden_states=True gives {arch.num_layers + 1}; pass the whole tuple "
                "from the same model"
            )
    result = from_states(state_batch(list(hidden)), mask=attention_mask, bootstrap=bootstrap, **options)
    result.config["given"] = "hidden_states (effdepth.from_hidden_states)"
    result.config["states"] = "hidden"
    result.config["states_meaning"] = HIDDEN_MEANING
    result.config["hidden_states"] = {
        "states": f"hidden_states[0..{len(hidden) - 1}], the last through the final norm: the paper's convention",
        "same_as": "effdepth.measure(..., states='hidden') over the same passages",
        "before_the_final_norm": CAPTURE_HOW,
    }
    if model is not None:
        result.provenance["model"] = {"source": "hidden_states", **_model_record(module, arch, external)}
    return result


def from_states(states, *, mask=None, bootstrap: int = 0, **options) -> Result:
    """D_eff and everything else from states you already have, each row a passage.

    ``states`` is ``(L+1, batch, seq, d)`` (``states[0]`` = S_0), at least 4 passages; ``mask`` (``(batch,
    seq)``) marks real tokens; ``options`` are the :class:`Accumulator`'s. Pooled and analysed as
    :func:`effdepth.measure` does, so the same passages give measure's number. ``bootstrap`` defaults to 0
    here (measure: 1000): a quick look, often in a loop.

    >>> import effdepth, torch
    >>> walk = torch.randn(4, 16, 6, 8, dtype=torch.float64).cumsum(0)   # S_0..S_3 of 16 passages of 6 tokens
    >>> r = effdepth.from_states(walk)
    >>> r.passages, r.default.sequences, r.extras["passage_lengths"]["equal"]
    (True, 16, True)
    >>> effdepth.from_states(walk[:, :4], pooling="none").config["reduction"]["per_variant"]   # 24 tokens
    {'default': 24}
    """
    given = torch.as_tensor(states)
    s = state_batch(given)
    m = _mask(mask, s, given.dim())
    if m is not None and not bool(m.any()):
        raise EffdepthError(
            "the mask marks no real token (every row is padding): nothing to measure; mark real tokens with True/1"
        )
    _check_user_states(s)
    acc = Accumulator(bootstrap=bootstrap, **options)
    acc.update(s, m)
    result = acc.result()
    result.config["given"] = "states (effdepth.from_states)"
    return result


def _check_user_states(states: torch.Tensor) -> None:
    """Problems with states a user brings, said in their terms (no model ran here)."""
    finite = torch.isfinite(states).flatten(1).all(dim=1)
    if not bool(finite.all()):
        layer = int(torch.nonzero(~finite)[0])
        raise EffdepthError(
            f"states[{layer}] contains NaN or infinite values; from_states takes them as given, so check how they were computed"
        )
    if not bool(states.flatten(1).abs().amax(dim=1).gt(0).any()):
        warnings.warn(
            "every state is zero: nothing varies across samples, so every similarity is undefined (NaN) and "
            "D_eff says nothing about a model",
            stacklevel=3,
        )


def from_pooled(
    pooled,
    *,
    lengths=None,
    views=("default",),
    similarity=None,
    include_embedding: bool = False,
    bootstrap: int = AnalysisOptions.bootstrap,
    seed: int = 0,
    bootstrap_units: int | None = None,
    progress: bool = False,
) -> Result:
    """The paper's number from pooled vectors you already have: one vector per passage and state.

    ``pooled`` is ``(L+1, N, d)`` or a list of L+1 ``(N, d)`` matrices; ``lengths`` each passage's token count
    (for the length control). The analysis is :func:`effdepth.measure`'s passage mode, without drop-pos0.

    >>> import effdepth, numpy as np
    >>> walk = np.cumsum(np.random.default_rng(0).normal(size=(4, 64, 16)), axis=0)   # S_0..S_3 of 64 passages
    >>> r = effdepth.from_pooled(walk, bootstrap=0)
    >>> r.passages, r.default.num_states, round(r.default.reference, 3)
    (True, 3, 1.5)
    >>> effdepth.from_pooled(walk[:, :3])
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: pooled vectors of 3 passage(s): similarity across passages needs at least 4 (the debiased estimator pairs four distinct passages); give 4 or more rows per state
    """
    from effdepth.numerics.pooled_input import checked_pooled

    array = checked_pooled(pooled, lengths)
    options = {
        "views": views,
        "include_embedding": include_embedding,
        "bootstrap": bootstrap,
        "seed": seed,
        "similarity": similarity,
        "bootstrap_units": bootstrap_units,
    }
    analysis = AnalysisOptions(pooling="mean", **{k: v for k, v in options.items() if v is not None})
    missing = [v.name for v in analysis.view_specs if v.variant != "default"]
    if missing:
        raise EffdepthError(
            f"view(s) {', '.join(missing)} pool tokens otherwise than the mean, and only the mean pooled "
            "vectors were given; use views made of default, length and top{k}pc"
        )
    result = analysed_result(
        {"default": array}, analysis, lengths=None if lengths is None else np.asarray(lengths), progress=progress
    )
    result.config.update(
        {
            "num_layers": array.shape[0] - 1,
            "num_passages": array.shape[1],
            "given": "pooled vectors (effdepth.from_pooled)",
        }
    )
    result.provenance = provenance_record(model={"id": "pooled vectors", "source": "given"})
    return result


def _hidden_states_model(model) -> tuple:
    """``(module, architecture, external wrapper or None)`` of the model that produced a hidden_states tuple."""
    external = adapt_external(model, allow_processed=True)
    if external is not None and external.library == TRANSFORMER_LENS:
        raise EffdepthError(
            f"TransformerLens models give no hidden_states tuple; use effdepth.measure(model, corpus) or {CAPTURE_HOW}"
        )
    module = external.model if external is not None else model
    return module, resolve_architecture(module), external


def _model_record(module, arch, external) -> dict:
    """What a model object is, for the provenance record."""
    return {
        "class": type(module).__name__,
        "model_type": arch.model_type,
        "id": getattr(module, "name_or_path", None) or None,
        **(external.info if external is not None else {}),
    }


def state_batch(states) -> torch.Tensor:
    """States as one ``(L+1, batch, seq, d)`` tensor, detached.

    >>> tuple(state_batch([torch.zeros(5, 4)] * 3).shape)
    (3, 1, 5, 4)
    """
    if isinstance(states, CapturedStates):
        s = states.tensor
    elif isinstance(states, (list, tuple)):
        if len(states) < 2 or not all(isinstance(t, torch.Tensor) for t in states):
            raise EffdepthError(
                f"states must be at least two tensors S_0..S_L (one per state), got {len(states)} items"
            )
        shapes = {tuple(t.shape) for t in states}
        if len(shapes) != 1:
            raise EffdepthError(f"every state must have the same shape (batch, seq, d), got {sorted(shapes)}")
        s = torch.stack([t.detach() for t in states])
    elif isinstance(states, torch.Tensor):
        s = states
    else:
        raise EffdepthError(
            f"states must be what effdepth.capture yields, a (L+1, batch, seq, d) tensor or a list of tensors, got {type(states).__name__}"
        )
    shape = tuple(s.shape)
    s = s.detach()[:, None] if s.dim() == 3 else s.detach()
    if s.dim() != 4 or s.shape[0] < 2 or s.shape[2] < 1:
        raise EffdepthError(f"states must be shaped (L+1, batch, seq, d) or (L+1, seq, d) with L >= 1, got {shape}")
    if not torch.is_floating_point(s):
        s = s.to(torch.float64)
    return s


def _mask(mask, states: torch.Tensor, given_dims: int = 4) -> torch.Tensor | None:
    """The mask as ``(batch, seq)`` booleans; ``given_dims`` 3 means one passage, ``(L+1, seq, d)``."""
    if mask is None:
        return None
    m = torch.as_tensor(mask)
    m = m[None] if m.dim() == 1 else m
    batch, seq = int(states.shape[1]), int(states.shape[2])
    if tuple(m.shape) != (batch, seq):
        one = given_dims == 3
        shape = (states.shape[0], *states.shape[2:]) if one else tuple(states.shape)
        raise EffdepthError(
            f"mask of shape {tuple(torch.as_tensor(mask).shape)} does not match states of shape {tuple(shape)}: mask "
            f"must be {f'({seq},) or (1, {seq})' if one else f'({batch}, {seq})'}, one entry per token (True/1 = real token)"
        )
    return m.bool()
