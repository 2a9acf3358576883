"""Calibrated references (docs/method.md#calibrated-references): null streams measured through the very same code.

For each analysed batch a surrogate stream ``S'_l = S'_{l-1} + Z_l`` is built
with i.i.d. Gaussian ``Z_l`` of the batch's shape (padding positions stay
zero), each sequence's ``|Z_l|^2`` rescaled to its measured ``|U_l|^2``
exactly:

- "matched": ``S'_0`` is the measured ``S_0``: persistent initial state and
  update sizes kept, correlations removed;
- "structural": every update gets the sequence's mean measured update
  energy and ``S'_0 = 0``; with ``include_embedding``, ``S'_0`` is a Gaussian
  with that same energy, as F_N counts S_0 as one unit update.

The surrogate goes through the same views, similarity and estimator as the
real states, so for cka it calibrates the finite-sample bias of HSIC; for
frobenius it converges to F_N and R_matched as tokens x d grows.

Noise is drawn per sequence from a generator seeded by ``(seed, sequence
index)``, so the surrogate of a sequence does not depend on how sequences
were batched, resumed or shared between processes; both kinds use the same
draws (common random numbers: their difference is less noisy).
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import EffdepthError
from .accumulate import deff_statistics
from .cka import GRAM_BUDGET_BYTES
from .fits import fit_description
from .sequences import real_counts
from .similarities import COSINE_SIMILARITIES, validate_similarities
from .streams import ViewAccumulator

KINDS = ("structural", "matched")


def sequence_generator(seed: int, index: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator for sequence ``index`` of a run with ``seed``: independent streams per sequence.

    >>> a = torch.randn(2, generator=sequence_generator(0, 5))
    >>> bool((a == torch.randn(2, generator=sequence_generator(0, 5))).all())
    True
    """
    mixed = int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
    return torch.Generator(device=device).manual_seed(mixed)


def update_energies(states: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sequence ``|U_l|^2`` over real tokens, ``(L, batch)``, from explicit differences.

    >>> s = torch.zeros(3, 1, 2, 2, dtype=torch.float64); s[1, 0, :, 0] = 1.0; s[2] = 2 * s[1]
    >>> update_energies(s).flatten().tolist()
    [2.0, 2.0]
    """
    m, b = states.shape[:2]
    out = torch.empty(m - 1, b, dtype=torch.float64, device=states.device)
    # Padding is zeroed, not multiplied by 0: a padded position may hold NaN or inf (fully masked
    # attention rows), and NaN * 0 is NaN.
    padding = None if mask is None else ~mask.to(device=states.device, dtype=torch.bool)[:, :, None]
    # One layer at a time in three reused float64 arrays: no float64 copy of the whole batch, and
    # no fresh arrays per layer (of several MB each, their page faults cost more than the sums).
    previous = torch.empty(states.shape[1:], dtype=torch.float64, device=states.device)
    current, step = torch.empty_like(previous), torch.empty_like(previous)
    previous.copy_(states[0])
    for layer in range(1, m):
        current.copy_(states[layer])
        torch.sub(current, previous, out=step)
        if padding is not None:
            step.masked_fill_(padding, 0.0)
        flat = step.view(b, -1)
        out[layer - 1] = torch.linalg.vecdot(flat, flat)
        previous, current = current, previous
    return out


def surrogate_states(
    states: torch.Tensor,
    mask: torch.Tensor | None,
    kind: str,
    generator,
    include_embedding: bool = False,
) -> torch.Tensor:
    """The surrogate stream of a batch ``(L+1, batch, seq, d)``, float64 on the states' device.

    ``generator`` is one ``torch.Generator`` (used for the sequences in order)
    or one per sequence. Each sequence draws ``(L+1, n_b, d)`` normals for its
    n_b real tokens (row 0 is the structural S'_0 with the embedding), so the
    draws do not depend on the padding.

    >>> s = torch.randn(4, 2, 5, 8, dtype=torch.float64).cumsum(0)
    >>> z = surrogate_states(s, None, "matched", torch.Generator().manual_seed(0))
    >>> torch.allclose(update_energies(z), update_energies(s), rtol=1e-12)
    True
    """
    if kind not in KINDS:
        raise EffdepthError(f"unknown surrogate kind {kind!r}; choose from {', '.join(KINDS)}")
    source = _Source.of(states, mask)
    m, b, t, d = states.shape
    generators = list(generator) if isinstance(generator, (list, tuple)) else [generator] * b
    if len(generators) != b:
        raise ValueError(f"{len(generators)} generators for {b} sequences")
    out = torch.zeros(m, b, t, d, dtype=torch.float64, device=states.device)
    for i, gen in enumerate(generators):
        tokens = source.tokens(i)
        if tokens.numel():
            draw = _draw(source, tokens.numel(), gen)
            buffer = torch.empty_like(draw, dtype=torch.float64)
            out[:, i, tokens] = _sequence_surrogate(source, i, tokens, kind, draw, include_embedding, buffer)
    return out


class _Source:
    """What a batch's surrogate streams need of it: S_0 (kept in the states' dtype), each
    sequence's update energies (float64) and the real-token mask."""

    def __init__(self, s0: torch.Tensor, measured: torch.Tensor, real: torch.Tensor, num_states: int):
        self.s0, self.measured, self.real, self.num_states = s0, measured, real, num_states

    def tokens(self, index: int) -> torch.Tensor:
        """Positions of sequence ``index``'s real tokens."""
        return torch.nonzero(self.real[index], as_tuple=False).flatten()

    @classmethod
    def of(cls, states: torch.Tensor, mask: torch.Tensor | None) -> "_Source":
        m, b, t, _ = states.shape
        real = (
            torch.ones(b, t, dtype=torch.bool, device=states.device) if mask is None else mask.to(states.device).bool()
        )
        # update_energies converts one layer at a time: a float64 copy of the whole batch here
        # would double its memory and cost a pass over it.
        return cls(states[0], update_energies(states, mask), real, m)  # no mask: no multiplication by ones


def _draw(source: _Source, n: int, generator) -> torch.Tensor:
    """One sequence's normal draws ``(L+1, n, d)`` for its n real tokens. float32 is plenty:
    the draws are rescaled to the measured energies in float64, and drawing is a main cost."""
    m, d = source.num_states, source.s0.shape[-1]
    draw = torch.randn(m, n, d, generator=generator, dtype=torch.float32, device=generator.device)
    return draw.to(source.s0.device)


def _sequence_surrogate(
    source: _Source,
    index: int,
    tokens: torch.Tensor,
    kind: str,
    draw: torch.Tensor,
    include_embedding: bool,
    out: torch.Tensor,
) -> torch.Tensor:
    """Sequence ``index``'s surrogate stream ``(L+1, n, d)`` over its real ``tokens``, built in
    ``out`` (float64) from its draws, one layer at a time."""
    m = source.num_states
    measured = source.measured[:, index]  # (L,)
    mean_update = measured.mean()
    out.copy_(draw)
    for layer in range(1, m):
        target = measured[layer - 1] if kind == "matched" else mean_update
        _rescale(out[layer], target)
    if kind == "matched":
        out[0].copy_(source.s0[index, tokens])
    elif include_embedding:
        _rescale(out[0], mean_update)
    else:
        out[0].zero_()
    for layer in range(1, m):  # S'_l = S'_{l-1} + Z_l, one explicit addition per layer
        out[layer] += out[layer - 1]
    return out


def _rescale(z: torch.Tensor, target: torch.Tensor) -> None:
    """Scale ``z`` in place so that its squared norm is exactly ``target`` (0 stays 0)."""
    flat = z.reshape(-1)
    energy = torch.dot(flat, flat)
    z *= torch.where(energy > 0, torch.sqrt(target / torch.where(energy > 0, energy, 1.0)), 0.0)


class CalibratedReferences:
    """The structural and matched surrogate streams of a measurement, one accumulator per kind.

    Each kind's :class:`~effdepth.numerics.streams.ViewAccumulator` has the
    same views, similarities and ``include_embedding`` as the real one; views
    that need a fit (center, top-k PC) fit it on the surrogates of the
    sequences the real stream fits on (:meth:`fit_batch` with the same
    batches, then :meth:`finalize_fit`), up to ``fit_seqs`` of them (default:
    ``max_seqs``); an update before any fit fits on its own batch, as the real
    stream does.
    ``max_seqs`` caps the sequences measured (``None``: all); ``first_sequence``
    is the global index of the first sequence this instance measures (a rank's
    offset in a distributed run), so every sequence gets the same noise
    whoever measures it. The fit phase always starts at global sequence 0.

    >>> cal = CalibratedReferences(["default"], similarities=("cka",), seed=1)
    >>> cal.update(torch.randn(4, 4, 6, 8).cumsum(0))
    >>> cal.unit_statistics("default", "cka", kind="structural").units       # two pairs
    2
    """

    def __init__(
        self,
        views=("default",),
        *,
        include_embedding: bool = False,
        similarities=("cka",),
        seed: int = 0,
        max_seqs: int | None = None,
        fit_seqs: int | None | str = "max_seqs",
        first_sequence: int = 0,
        gram_budget_bytes: int = GRAM_BUDGET_BYTES,
        **accumulator_options,
    ):
        if max_seqs is not None and int(max_seqs) < 0:
            raise EffdepthError(f"--surrogate-seqs must be at least 0 (or all), got {max_seqs}")
        self.include_embedding = include_embedding
        self.seed = int(seed)
        self.max_seqs = None if max_seqs is None else int(max_seqs)
        self.fit_seqs = self.max_seqs if fit_seqs == "max_seqs" else (None if fit_seqs is None else int(fit_seqs))
        self.first_sequence = int(first_sequence)
        self.sequences = 0
        # The fit phase: rows fed so far, and the non-empty sequences and real tokens among them.
        self._fit_rows = 0
        self._fitted_size = [0, 0]
        # D_eff of the surrogates is all the references need: no related measures, no update summaries.
        # (No similarity named: frobenius and token, which a ViewAccumulator always has.)
        statistics = deff_statistics(validate_similarities(similarities) or COSINE_SIMILARITIES)
        self.accumulators = {
            kind: ViewAccumulator(
                views,
                include_embedding=include_embedding,
                pc_estimate="calibration",
                similarities=similarities,
                gram_budget_bytes=gram_budget_bytes,
                statistics=statistics,
                **accumulator_options,
            )
            for kind in KINDS
        }

    @property
    def fitted(self) -> bool:
        return all(acc.fitted for acc in self.accumulators.values())

    def fit_batch(self, states: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Feed the surrogates of the next batch of the fit phase (global sequences from 0 on, up
        to ``fit_seqs``) to each kind's fit."""
        take = (
            states.shape[1] if self.fit_seqs is None else max(0, min(states.shape[1], self.fit_seqs - self._fit_rows))
        )
        if take == 0:
            return
        s, m = states[:, :take], None if mask is None else mask[:take]
        counts = real_counts(s, m)
        self._fitted_size = [self._fitted_size[0] + counts[0], self._fitted_size[1] + counts[1]]
        for kind, sequence in self._streams(_Source.of(s, m), self._fit_rows, take, s.device):
            self.accumulators[kind].fit_batch(sequence[:, None])
        self._fit_rows += take

    def finalize_fit(self, *, whole_run: bool = True) -> None:
        """Turn each kind's estimates into fits (after :meth:`fit_batch` over the fitted set)."""
        sequences, tokens = self._fitted_size
        how = "on the surrogates: " + fit_description(
            "calibration", sequences=sequences, tokens=tokens, whole_run=whole_run
        )
        for acc in self.accumulators.values():
            acc.finalize_fit(how, sequences=sequences, tokens=tokens, warn=False)

    def update(self, states: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Add the surrogates of a batch ``(L+1, batch, seq, d)`` (up to ``max_seqs`` in all)."""
        take = (
            states.shape[1] if self.max_seqs is None else max(0, min(states.shape[1], self.max_seqs - self.sequences))
        )
        if take == 0:
            return
        s, m = states[:, :take], None if mask is None else mask[:take]
        if not self.fitted and real_counts(s, m)[0]:
            self.fit_batch(s, m)
            self.finalize_fit(whole_run=False)
        if self.fitted:
            for kind, sequence in self._streams(_Source.of(s, m), self.first_sequence + self.sequences, take, s.device):
                self.accumulators[kind].update_sequence(sequence)
        self.sequences += take

    def _streams(self, source: "_Source", first: int, take: int, device):
        """Yield ``(kind, states (L+1, n, d))`` for each sequence and both kinds: one draw per
        sequence, shared by the kinds, and one work buffer per sequence (valid until the next)."""
        for i in range(take):
            tokens = source.tokens(i)
            if not tokens.numel():
                continue  # all padding: no token to measure, as in the real stream
            draw = _draw(source, tokens.numel(), sequence_generator(self.seed, first + i, device))
            buffer = torch.empty_like(draw, dtype=torch.float64)
            for kind in KINDS:
                yield kind, _sequence_surrogate(source, i, tokens, kind, draw, self.include_embedding, buffer)

    @property
    def measured_sequences(self) -> int:
        """Sequences with a real token whose surrogates were measured. ``sequences`` counts batch
        rows instead (all-padding rows included), as ``max_seqs`` and the noise's sequence index do:
        the first K rows of the corpus, whichever process measures them.

        >>> cal = CalibratedReferences(["default"], similarities=("cka",))
        >>> mask = torch.ones(3, 6, dtype=torch.bool); mask[1] = False      # row 1: all padding
        >>> cal.update(torch.randn(4, 3, 6, 8).cumsum(0), mask); cal.sequences, cal.measured_sequences
        (3, 2)
        """
        return self.accumulators["matched"].sequences

    def unit_statistics(self, view, similarity: str = "frobenius", kind: str = "matched"):
        """Per-sequence statistics of one view of one surrogate kind (see ``ViewAccumulator``)."""
        if kind not in KINDS:
            raise EffdepthError(f"unknown surrogate kind {kind!r}; choose from {', '.join(KINDS)}")
        return self.accumulators[kind].unit_statistics(view, similarity)

    def compute(self) -> dict:
        """Each kind's units, ``{kind: {view name: {similarity: UnitStatistics}}}`` (see ``ViewAccumulator.compute``)."""
        return {kind: acc.compute() for kind, acc in self.accumulators.items()}

    def state_dict(self) -> tuple:
        """``(arrays, meta)`` for resume: each kind's accumulator state, keys prefixed ``"<kind>/"``."""
        arrays, kinds = {}, {}
        for kind, acc in self.accumulators.items():
            a, kinds[kind] = acc.state_dict()
            arrays.update({f"{kind}/{k}": v for k, v in a.items()})
        meta = {
            "kinds": kinds,
            "seed": self.seed,
            "max_seqs": self.max_seqs,
            "first_sequence": self.first_sequence,
            "sequences": self.sequences,
        }
        return arrays, meta

    def load_state_dict(self, arrays: dict, meta: dict) -> None:
        """Continue from :meth:`state_dict` of calibrated references with the same options."""
        if meta["seed"] != self.seed or meta["first_sequence"] != self.first_sequence:
            raise EffdepthError(
                f"saved surrogate streams used seed {meta['seed']} from sequence {meta['first_sequence']}, "
                f"not seed {self.seed} from sequence {self.first_sequence}; rerun with the same seed"
            )
        for kind, acc in self.accumulators.items():
            prefix = f"{kind}/"
            acc.load_state_dict(
                {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}, meta["kinds"][kind]
            )
        self.sequences = int(meta["sequences"])

    def merge(self, other: "CalibratedReferences") -> None:
        """Append another instance's sequences (e.g. another rank's share)."""
        if other.seed != self.seed:
            raise EffdepthError(f"cannot merge surrogate streams of seeds {other.seed} and {self.seed}")
        for kind, acc in self.accumulators.items():
            acc.merge(other.accumulators[kind])
        self.sequences += other.sequences
