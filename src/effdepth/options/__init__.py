"""Every measurement option, in one place.

Three frozen dataclasses, validated once when built (one-line errors):

- :class:`LoadOptions`: what to load (model, revision, corpus, sequence
  length and count, dtype, device, permissions, block paths);
- :class:`AnalysisOptions`: how to analyse (views, similarity, the embedding
  state, PC estimate, bootstrap, seed, batch size);
- :class:`RunOptions`: how to run (progress bars, checkpoints); never changes
  a number.

:class:`Options` holds the first two. Its :meth:`Options.to_dict` is the one
description of a measurement that the saved config, the resume fingerprint
and the sweep key are made from; :meth:`Options.from_args` reads the command
line, :meth:`Options.build` the keyword arguments of :func:`effdepth.measure`.

Each option's default and the named protocols are in :mod:`.defaults`; the
checks of single options and of their combinations in :mod:`.checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ..data.corpus import check_corpus_spec, is_token_ids
from ..data.passages import check_passage_options
from ..errors import EffdepthError, UnknownOption
from ..numerics import passage_analysis, passage_views
from ..numerics.similarities import PASSAGE, TOKEN, parse_similarities
from ..numerics.views import parse_views
from .checks import (
    MIN_BOOTSTRAP,
    at_least,
    check_device,
    check_dtype,
    check_kernel_length,
    check_revision_target,
    check_tokenizer_spec,
    check_views_have_values,
    is_whole,
    parse_bytes,
    validate_options,
)
from .defaults import (
    DEFAULT_MAX_MEMORY,
    DEFAULT_SIMILARITY,
    DEFAULTS,
    MAX_BOOTSTRAP,
    PASSAGE_DEFAULTS,
    POOLINGS,
    PROTOCOLS,
    STATES,
    Protocol,
    check_protocol,
    resolve_defaults,
)

__all__ = [
    "AnalysisOptions",
    "DEFAULTS",
    "DEFAULT_MAX_MEMORY",
    "DEFAULT_SIMILARITY",
    "LoadOptions",
    "MAX_BOOTSTRAP",
    "MIN_BOOTSTRAP",
    "Options",
    "PASSAGE_DEFAULTS",
    "POOLINGS",
    "PROTOCOLS",
    "Protocol",
    "RunOptions",
    "STATES",
    "UNHASHED_OPTIONS",
    "at_least",
    "check_device",
    "check_dtype",
    "check_protocol",
    "check_revision_target",
    "check_tokenizer_spec",
    "parse_bytes",
    "resolve_defaults",
    "validate_options",
]


@dataclass(frozen=True)
class LoadOptions:
    """What to load: the model, its revision, the corpus and how it is cut into sequences.

    ``model`` and ``corpus`` may be Python objects (a loaded model, a tensor
    of token ids); :meth:`to_dict` then describes them instead.

    >>> LoadOptions(seq_len=16).seq_len
    16
    """

    model: object = None
    revision: str | None = None
    corpus: object = None
    tokenizer: object = None
    seq_len: int = DEFAULTS["seq_len"]
    num_seqs: int = DEFAULTS["num_seqs"]
    seed: int = DEFAULTS["seed"]
    add_bos: bool = True
    bos: str = "auto"
    passage_split: str = "windows"
    dtype: object = None
    device: str | None = None
    device_map: str | None = None
    trust_remote_code: bool = False
    allow_pickle: bool = False
    blocks_path: str | None = None
    embedding_path: str | None = None
    allow_long: bool = False
    allow_processed: bool = False

    def __post_init__(self):
        validate_options(
            seq_len=self.seq_len, num_seqs=self.num_seqs, seed=self.seed, bos=self.bos, passage_split=self.passage_split
        )
        # Cheap checks of paths and hardware come here, before seconds or minutes of loading.
        check_revision_target(self.model, self.revision)
        check_device(self.device)
        check_dtype(self.dtype)
        check_corpus_spec(self.corpus)
        if isinstance(self.tokenizer, Path):
            object.__setattr__(self, "tokenizer", str(self.tokenizer))
        check_tokenizer_spec(self.tokenizer)
        object.__setattr__(self, "seq_len", int(self.seq_len))
        object.__setattr__(self, "num_seqs", int(self.num_seqs))
        if self.dtype is not None and not isinstance(self.dtype, str):
            object.__setattr__(self, "dtype", str(self.dtype).replace("torch.", ""))
        if isinstance(self.corpus, Path):
            object.__setattr__(self, "corpus", str(self.corpus))


@dataclass(frozen=True)
class AnalysisOptions:
    """How to analyse the states: views, similarity, references, intervals.

    ``views`` is normalised to the tuple of view names (``"paper"`` expanded).

    >>> AnalysisOptions(views="paper").views[:2], AnalysisOptions(views="paper", pooling="none").views[:2]
    (('default', 'drop-pos0'), ('default', 'drop-pos0'))
    """

    views: tuple = ("default",)
    similarity: tuple | None = None
    pooling: str = "mean"
    states: str = "blocks"
    include_embedding: bool = False
    pc_estimate: str = "calibration"
    bootstrap: int = DEFAULTS["bootstrap"]
    seed: int = DEFAULTS["seed"]
    batch_size: int = DEFAULTS["batch_size"]
    surrogate_seqs: int | None = None
    max_memory: int = DEFAULT_MAX_MEMORY
    bootstrap_units: int = passage_analysis.DEFAULT_BOOTSTRAP_UNITS
    protocol: str | None = None

    def __post_init__(self):
        validate_options(
            batch_size=self.batch_size,
            bootstrap=self.bootstrap,
            pc_estimate=self.pc_estimate,
            seed=self.seed,
            pooling=self.pooling,
            states=self.states,
            bootstrap_units=self.bootstrap_units,
        )
        check_protocol(self.protocol)
        if self.passages:
            object.__setattr__(self, "similarity", parse_similarities(self.similarity, PASSAGE))
            object.__setattr__(self, "views", tuple(v.name for v in passage_views.parse_views(self.views)))
        else:
            if self.states != "blocks":
                raise EffdepthError(
                    "--states hidden is passage mode's (the paper's convention); token mode (--pooling none) "
                    "reads the blocks"
                )
            object.__setattr__(self, "similarity", parse_similarities(self.similarity, TOKEN))
            object.__setattr__(self, "views", tuple(v.name for v in parse_views(self.views)))
        object.__setattr__(self, "bootstrap", int(self.bootstrap))
        object.__setattr__(self, "batch_size", int(self.batch_size))
        object.__setattr__(self, "max_memory", parse_bytes(self.max_memory))
        if isinstance(self.surrogate_seqs, str) and self.surrogate_seqs.strip().isdigit():
            object.__setattr__(self, "surrogate_seqs", int(self.surrogate_seqs))
        if self.surrogate_seqs is not None:
            if str(self.surrogate_seqs) == "all":
                object.__setattr__(self, "surrogate_seqs", None)
            elif not is_whole(self.surrogate_seqs) or int(self.surrogate_seqs) < 0:
                raise EffdepthError(
                    f"--surrogate-seqs must be 0 (none), a number of sequences or all, got {self.surrogate_seqs}"
                )
            else:
                object.__setattr__(self, "surrogate_seqs", int(self.surrogate_seqs))
        if not self.passages:
            check_views_have_values(self.view_specs, self.similarity[0])

    #: The options that shape the accumulated statistics: a resumed run must match them (batch
    #: size, intervals and the memory budget do not change what is accumulated).
    STATISTICS_FIELDS = ("views", "similarity", "include_embedding", "pc_estimate", "seed", "surrogate_seqs", "pooling")

    def to_dict(self) -> dict:
        """Every analysis option, JSON-able.

        >>> AnalysisOptions(views="default,top1pc").to_dict()["views"]
        ['default', 'top1pc']
        """
        return {f.name: _describe(getattr(self, f.name)) for f in fields(self)}

    def statistics_dict(self) -> dict:
        """The options of :data:`STATISTICS_FIELDS`: what a checkpoint's statistics belong to.

        >>> sorted(AnalysisOptions().statistics_dict())[:3]
        ['include_embedding', 'pc_estimate', 'pooling']
        """
        return {k: v for k, v in self.to_dict().items() if k in self.STATISTICS_FIELDS}

    @property
    def primary_similarity(self) -> str:
        """The first similarity: the one ``result.views`` holds."""
        return self.similarity[0]

    @property
    def passages(self) -> bool:
        """Passage mode (``pooling="mean"``, the default): similarity across passages."""
        return self.pooling == "mean"

    @property
    def view_specs(self) -> list:
        return passage_views.parse_views(self.views) if self.passages else parse_views(self.views)

    def analysis_plan(self, device: str = "cpu") -> "passage_analysis.AnalysisPlan":
        """Passage mode's analysis stage for these options.

        >>> AnalysisOptions(views="paper", bootstrap=0).analysis_plan().similarities
        ('cka', 'cka-debiased')
        """
        return passage_analysis.AnalysisPlan(
            views=self.views,
            similarities=self.similarity,
            include_embedding=self.include_embedding,
            bootstrap=self.bootstrap,
            bootstrap_units=self.bootstrap_units,
            seed=self.seed,
            calibrated=self.surrogate_seqs != 0,
            max_memory=self.max_memory,
            device=device,
        )


@dataclass(frozen=True)
class RunOptions:
    """How to run: progress bars and checkpoints. Never changes a number.

    >>> RunOptions(progress=False).checkpoint_every_s
    30.0
    """

    progress: bool = True
    checkpoint: str | Path | None = None
    resume: bool = False
    checkpoint_every_s: float = 30.0
    #: What a checkpoint records about the run (its options and the command that continues it).
    record: dict | None = None


_LOAD = tuple(f.name for f in fields(LoadOptions))
_ANALYSIS = tuple(f.name for f in fields(AnalysisOptions))
_RUN = tuple(f.name for f in fields(RunOptions))

#: Options that do not change the numbers (statistics are per sequence;
#: permissions are not measurements): left out of a sweep job's key.
UNHASHED_OPTIONS = ("batch_size", "device", "device_map", "trust_remote_code", "allow_pickle")


@dataclass(frozen=True)
class Options:
    """One measurement's options: :class:`LoadOptions` and :class:`AnalysisOptions`.

    >>> o = Options.build(seq_len=16, views="default,top1pc", seed=3)
    >>> o.load.seq_len, o.analysis.views, o.load.seed == o.analysis.seed == 3
    (16, ('default', 'top1pc'), True)
    >>> Options.build(seq_lenn=16)
    Traceback (most recent call last):
    ...
    effdepth.errors.UnknownOption: unknown measurement option 'seq_lenn'; known: model, revision, corpus, ...
    """

    load: LoadOptions = field(default_factory=LoadOptions)
    analysis: AnalysisOptions = field(default_factory=AnalysisOptions)

    @classmethod
    def build(cls, **values) -> "Options":
        """From keyword arguments (those of :func:`effdepth.measure`); ``seed`` sets both parts.

        ``protocol`` fills in its settings where an option is not given (``None``
        counts as not given); ``seq_len`` and ``num_seqs`` default by mode (passage
        mode: :data:`PASSAGE_DEFAULTS`; ``pooling="none"``: :data:`DEFAULTS`).

        >>> o = Options.build(protocol="paper", num_seqs=64)
        >>> o.load.num_seqs, o.load.seq_len, o.analysis.states, o.analysis.protocol
        (64, 512, 'hidden', 'paper')
        """
        known = _LOAD + tuple(n for n in _ANALYSIS if n not in _LOAD)
        for name in values:
            if name not in known:
                raise UnknownOption(f"unknown measurement option {name!r}; known: {', '.join(known)}")
        values = resolve_defaults(values)
        load = LoadOptions(**{k: v for k, v in values.items() if k in _LOAD})
        analysis = AnalysisOptions(**{k: v for k, v in values.items() if k in _ANALYSIS})
        check_kernel_length(load, analysis)
        if analysis.passages and not is_token_ids(load.corpus):
            check_passage_options(load.seq_len, load.num_seqs, load.bos, load.passage_split)
            passage_views.check_top_pcs(analysis.view_specs, load.num_seqs, 1 << 62)
        return cls(load, analysis)

    @classmethod
    def from_args(cls, args, **overrides) -> "Options":
        """From an ``argparse.Namespace`` with the shared measurement arguments; ``overrides`` win.

        >>> import argparse
        >>> Options.from_args(argparse.Namespace(model="m", seq_len=16, progress=False)).load.model
        'm'
        """
        names = set(_LOAD) | set(_ANALYSIS)
        return cls.build(**{**{k: v for k, v in vars(args).items() if k in names}, **overrides})

    @classmethod
    def from_dict(cls, data: dict) -> "Options":
        """The inverse of :meth:`to_dict` for JSON-able options (e.g. a sweep job's).

        >>> o = Options.build(corpus="shakespeare", seq_len=16)
        >>> Options.from_dict(o.to_dict()) == o
        True
        """
        return cls.build(**{k: (tuple(v) if k in ("views", "similarity") else v) for k, v in data.items()})

    def replace(self, **values) -> "Options":
        """A copy with some options changed (validated again).

        >>> Options().replace(seq_len=8).load.seq_len
        8
        """
        load = replace(self.load, **{k: v for k, v in values.items() if k in _LOAD})
        analysis = replace(self.analysis, **{k: v for k, v in values.items() if k in _ANALYSIS})
        unknown = set(values) - set(_LOAD) - set(_ANALYSIS)
        if unknown:
            raise UnknownOption(f"unknown measurement option {sorted(unknown)[0]!r}")
        return Options(load, analysis)

    def to_dict(self) -> dict:
        """Every option, flat and JSON-able; Python objects are described by type.

        >>> d = Options.build(seq_len=16).to_dict()
        >>> d["seq_len"], d["views"], d["similarity"], d["model"]
        (16, ['default'], ['cka', 'cka-debiased'], None)
        """
        return {**{f.name: _describe(getattr(self.load, f.name)) for f in fields(self.load)}, **self.analysis.to_dict()}

    def key_dict(self) -> dict:
        """The options that can change a number: what a sweep job's key hashes.

        >>> "batch_size" in Options().key_dict()
        False
        """
        return {k: v for k, v in self.to_dict().items() if k not in UNHASHED_OPTIONS}


def _describe(value):
    """JSON-able form of an option value; objects (models, tensors) by their type and shape."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (str, int, float, bool)) or v is None for v in value):
            return list(value)
    shape = getattr(value, "shape", None)
    name = type(value).__name__
    return f"<{name} {tuple(shape)}>" if shape is not None else f"<{name}>"
