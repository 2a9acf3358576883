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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from .data.corpus import check_corpus_spec, is_token_ids
from .data.passages import BOS_CHOICES, SPLITS, check_passage_options
from .data.paper import PAPER_CORPUS
from .errors import EffdepthError, UnknownOption
from .numerics import passage_analysis, passage_views
from .numerics.cka import MIN_TOKENS, ViewUnavailable, require_cka_view
from .numerics.fits import PC_ESTIMATES
from .numerics.similarities import NAMES as SIMILARITIES, get_similarity
from .numerics.views import parse_views

MAX_BOOTSTRAP = 100_000
#: Defaults shared by both modes, and token mode's sequence sizes (``--pooling none``).
DEFAULTS = {"seq_len": 256, "num_seqs": 32, "batch_size": 8, "bootstrap": 1000, "seed": 0}
#: Passage mode's sizes (the default mode): passages of at most 512 tokens, as the paper's.
PASSAGE_DEFAULTS = {"seq_len": 512, "num_seqs": 1024}
POOLINGS = ("mean", "none")
STATES = ("blocks", "hidden")


@dataclass(frozen=True)
class Protocol:
    """A named set of measurement settings (``--protocol NAME``); flags given beside it win and are recorded."""

    name: str
    description: str
    settings: dict


PROTOCOLS = {
    "paper": Protocol("paper", "the paper's settings (PAPER-PROTOCOL section 1): 10,000 FineWeb-Edu passages of at most "
                      "512 tokens (each document's first tokens), bfloat16 weights, transformers' hidden_states, linear CKA",
                      {"corpus": PAPER_CORPUS, "num_seqs": 10_000, "seq_len": 512, "dtype": "bfloat16", "states": "hidden",
                       "pooling": "mean", "passage_split": "document", "similarity": "cka", "bos": "auto"}),
}


def check_protocol(name) -> None:
    """An unknown protocol fails at once.

    >>> check_protocol("papr")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: unknown --protocol 'papr'; known: paper
    """
    if name is not None and name not in PROTOCOLS:
        raise EffdepthError(f"unknown --protocol {name!r}; known: {', '.join(PROTOCOLS)}")


def at_least(minimum: int, message: str):
    """A check that raises ``message`` (``{v}``: the value) unless the value is a whole number >= ``minimum``.

    >>> at_least(1, "--k must be >= 1, got {v}")(0)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --k must be >= 1, got 0
    """

    def check(value):
        if not _is_int(value) or int(value) < minimum:
            raise EffdepthError(message.format(v=value))

    return check


def _is_int(value) -> bool:
    if isinstance(value, bool):
        return False
    try:
        return int(value) == value
    except (TypeError, ValueError, OverflowError):
        return False


#: Fewer resamples cannot bound a 95% percentile interval: the point estimate falls outside the
#: range of B resamples about 2 * 0.5^B of the time (always for one).
MIN_BOOTSTRAP = 10


def _check_bootstrap(value) -> None:
    if not _is_int(value) or not (int(value) == 0 or MIN_BOOTSTRAP <= int(value) <= MAX_BOOTSTRAP):
        raise EffdepthError(f"--bootstrap must be 0 (off) or a number of resamples from {MIN_BOOTSTRAP} to {MAX_BOOTSTRAP:,} "
                            f"(default {DEFAULTS['bootstrap']:,}), got {value}: fewer cannot bound a 95% interval")


def _check_choice(flag: str, choices):
    def check(value):
        if value not in choices:
            raise EffdepthError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")

    return check


#: The similarity of a measurement unless told otherwise (docs/method.md#why-cka).
DEFAULT_SIMILARITY = "cka"
#: What ``--similarity all`` means: the three families, the default first (cka-full only when named).
ALL_SIMILARITIES = ("cka", "frobenius", "token")
DEFAULT_MAX_MEMORY = 4 * 2**30


def parse_similarities(value) -> tuple:
    """One name, a comma list, ``all`` or a sequence -> the similarities, the primary (first) first.

    >>> parse_similarities("all"), parse_similarities("token,cka")
    (('cka', 'frobenius', 'token'), ('token', 'cka'))
    """
    names = value.split(",") if isinstance(value, str) else list(value or ())
    out: list = []
    for name in names:
        name = str(name).strip()
        for n in ALL_SIMILARITIES if name == "all" else (name,):
            if n not in SIMILARITIES:
                raise EffdepthError(f"--similarity must be one of {', '.join(SIMILARITIES)}, a comma list of them, or all; got {n!r}")
            if n not in out:
                out.append(n)
    if not out:
        raise EffdepthError("--similarity is empty; use e.g. --similarity cka or --similarity all")
    return tuple(out)


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
          "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


def parse_bytes(value) -> int:
    """``4GiB``, ``500MB``, ``1e9`` or a number of bytes -> bytes.

    >>> parse_bytes("4GiB"), parse_bytes("500MB"), parse_bytes(1024)
    (4294967296, 500000000, 1024)
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number, unit = float(value), ""
    else:
        m = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([A-Za-z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise EffdepthError(f"--max-memory must be a size such as 4GiB, 500MB or a number of bytes, got {value!r}")
        number, unit = float(m.group(1)), m.group(2).lower()
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise EffdepthError(f"--max-memory must be positive, got {value!r}")
    return size


_CHECKS = {
    "seq_len": at_least(2, "--seq-len must be at least 2 (D_eff needs a token after BOS), got {v}"),
    "num_seqs": at_least(1, "--num-seqs must be at least 1, got {v}"),
    "batch_size": at_least(1, "--batch-size must be at least 1, got {v}"),
    "seed": at_least(0, "--seed must be a non-negative integer, got {v}"),
    "bootstrap": _check_bootstrap,
    "similarity": parse_similarities,
    "pc_estimate": _check_choice("--pc-estimate", PC_ESTIMATES),
    "pooling": _check_choice("--pooling", POOLINGS),
    "states": _check_choice("--states", STATES),
    "bos": _check_choice("--bos", BOS_CHOICES),
    "passage_split": _check_choice("--passage-split", SPLITS),
    "bootstrap_units": at_least(2, "--bootstrap-units must be at least 2, got {v}"),
}


def validate_options(**values) -> None:
    """One-line errors for measurement options, before anything is loaded.

    >>> validate_options(seq_len=256, bootstrap=1000)
    >>> validate_options(seq_len=1)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --seq-len must be at least 2 (D_eff needs a token after BOS), got 1
    """
    for name, value in values.items():
        _CHECKS[name](value)


def check_revision_target(model, revision) -> None:
    """Revisions belong to hub models: refuse one for a local folder, a ``.gguf`` file or a loaded model.

    >>> check_revision_target("EleutherAI/pythia-70m", "step1000")
    >>> check_revision_target("model.gguf", "main")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --revision main applies to Hugging Face hub models, not to model.gguf; drop --revision (a local folder or .gguf file is one fixed set of weights)
    """
    if revision is None:
        return
    if model is None:
        what = "the embedded SmolLM2 model"
    elif not isinstance(model, (str, Path)):
        what = f"an already loaded {type(model).__name__}"
    elif str(model).endswith(".gguf") or Path(str(model)).expanduser().exists():
        what = str(model)
    else:
        return
    raise EffdepthError(
        f"--revision {revision} applies to Hugging Face hub models, not to {what}; "
        "drop --revision (a local folder or .gguf file is one fixed set of weights)"
    )


def check_tokenizer_spec(tokenizer) -> None:
    """A ``tokenizer`` given as a path that is not there fails now, before the model loads
    (a string is a folder, a Hugging Face id or a ``.gguf`` file; an object is used as it is).

    >>> check_tokenizer_spec("EleutherAI/pythia-70m")
    """
    if isinstance(tokenizer, str):
        from .models import check_tokenizer_path

        check_tokenizer_path(tokenizer)


def check_device(device) -> None:
    """A device that is not there fails now, not after the model has loaded.

    >>> check_device("cpu")
    """
    if device in (None, "auto", "cpu"):
        return
    from .models import resolve_device

    resolve_device(device)


def check_dtype(dtype) -> None:
    """An unknown dtype fails now, not after the model has loaded.

    >>> check_dtype("bfloat16")
    """
    if dtype is None or dtype == "auto" or not isinstance(dtype, str):
        return
    from .models import DTYPES

    if dtype.lower() not in DTYPES:
        raise EffdepthError(f"unknown dtype {dtype!r}; choose from float32, bfloat16, float16")


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
    passage_split: str = "paragraphs"
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
        validate_options(seq_len=self.seq_len, num_seqs=self.num_seqs, seed=self.seed, bos=self.bos,
                         passage_split=self.passage_split)
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
    (('default', 'drop-bos'), ('default', 'drop-pos0'))
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
        validate_options(batch_size=self.batch_size, bootstrap=self.bootstrap, pc_estimate=self.pc_estimate, seed=self.seed,
                         pooling=self.pooling, states=self.states, bootstrap_units=self.bootstrap_units)
        check_protocol(self.protocol)
        if self.passages:
            object.__setattr__(self, "similarity", passage_analysis.parse_similarities(self.similarity or "cka"))
            object.__setattr__(self, "views", tuple(v.name for v in passage_views.parse_views(self.views)))
        else:
            if self.states != "blocks":
                raise EffdepthError("--states hidden is passage mode's (the paper's convention); token mode (--pooling none) "
                                    "reads the blocks")
            object.__setattr__(self, "similarity", parse_similarities(self.similarity or DEFAULT_SIMILARITY))
            object.__setattr__(self, "views", tuple(v.name for v in parse_views(self.views)))
        object.__setattr__(self, "bootstrap", int(self.bootstrap))
        object.__setattr__(self, "batch_size", int(self.batch_size))
        object.__setattr__(self, "max_memory", parse_bytes(self.max_memory))
        if isinstance(self.surrogate_seqs, str) and self.surrogate_seqs.strip().isdigit():
            object.__setattr__(self, "surrogate_seqs", int(self.surrogate_seqs))
        if self.surrogate_seqs is not None:
            if str(self.surrogate_seqs) == "all":
                object.__setattr__(self, "surrogate_seqs", None)
            elif not _is_int(self.surrogate_seqs) or int(self.surrogate_seqs) < 0:
                raise EffdepthError(f"--surrogate-seqs must be 0 (none), a number of sequences or all, got {self.surrogate_seqs}")
            else:
                object.__setattr__(self, "surrogate_seqs", int(self.surrogate_seqs))
        if not self.passages:
            _check_views_have_values(self.view_specs, self.similarity[0])

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
            views=self.views, similarities=self.similarity, include_embedding=self.include_embedding, bootstrap=self.bootstrap,
            bootstrap_units=self.bootstrap_units, seed=self.seed, calibrated=self.surrogate_seqs != 0,
            max_memory=self.max_memory, device=device)


def _check_kernel_length(load: "LoadOptions", analysis: "AnalysisOptions") -> None:
    """cka needs 4 tokens per sequence in a view: refuse sequences too short for every view before anything loads."""
    primary = analysis.primary_similarity
    if analysis.passages or get_similarity(primary).additive or not isinstance(load.corpus, (str, type(None))):
        return
    shortest_loss = min(1 if spec.selection == "drop-pos0" else 0 for spec in analysis.view_specs)
    if load.seq_len - shortest_loss < MIN_TOKENS:
        raise EffdepthError(f"--seq-len {load.seq_len} leaves fewer than {MIN_TOKENS} tokens per sequence in every view, "
                            f"and {primary} needs {MIN_TOKENS}; use --seq-len {MIN_TOKENS + shortest_loss} or more, "
                            "or put frobenius or token first in --similarity")


def _check_views_have_values(specs, similarity: str) -> None:
    """Refuse, before anything runs, a run whose every view has no value under its primary similarity."""
    if get_similarity(similarity).additive:
        return
    reasons = []
    for spec in specs:
        try:
            require_cka_view(spec, similarity)
            return
        except ViewUnavailable as exc:
            reasons.append(exc.reason)
    raise EffdepthError(f"no view has a {similarity} value ({'; '.join(reasons)}); add a view such as default, "
                        "or put frobenius or token first in --similarity")


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


def resolve_defaults(values: dict) -> dict:
    """Options as given, with the protocol's settings and each mode's sizes where none is given.

    >>> resolve_defaults({"pooling": "none"})["seq_len"], resolve_defaults({})["seq_len"]
    (256, 512)
    """
    given = {k: v for k, v in values.items() if v is not None}
    check_protocol(given.get("protocol"))
    if given.get("protocol"):
        given = {**PROTOCOLS[given["protocol"]].settings, **given}
    passages = given.get("pooling", "mean") == "mean"
    for name, value in (PASSAGE_DEFAULTS if passages else DEFAULTS).items():
        if name in ("seq_len", "num_seqs"):
            given.setdefault(name, value)
    if passages and given.get("add_bos") is False:  # --no-bos in passage mode: no special token at all
        given.setdefault("bos", "never")
    return given


def token_mode(values: dict, what: str) -> dict:
    """``values`` with ``pooling="none"`` where no pooling is given: for the entry points that measure
    per-token statistics only (the residual-carry intervention, torchrun); passage mode there fails at once.

    >>> token_mode({"seq_len": 16}, "intervene")["pooling"]
    'none'
    >>> token_mode({"pooling": "mean"}, "intervene")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: intervene measures in token mode (--pooling none) only; drop --pooling mean, or measure passage mode with effdepth measure
    """
    if values.get("pooling") in (None, "none"):
        return {**values, "pooling": "none"}
    raise EffdepthError(f"{what} measures in token mode (--pooling none) only; drop --pooling {values['pooling']}, "
                        "or measure passage mode with effdepth measure")


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
        _check_kernel_length(load, analysis)
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
