"""Every measurement option, in one place: frozen dataclasses validated once when built (one-line errors).

:meth:`Options.to_dict` is the one description of a measurement that the saved config, the resume
fingerprint and the sweep key are made of; every command line is built from these declarations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from effdepth.data.corpus import check_corpus_spec, is_token_ids
from effdepth.data.passages import BOS_CHOICES, SPLITS, check_passage_options
from effdepth.errors import EffdepthError, UnknownOption
from effdepth.numerics import analysis as numerics_analysis
from effdepth.numerics import views as numerics_views
from effdepth.numerics.similarities import parse_similarities, similarity_choices
from effdepth.options.checks import (
    at_least,
    check_device,
    check_dtype,
    check_revision_target,
    check_tokenizer_spec,
    is_whole,
    parse_bytes,
    validate_options,
)
from effdepth.options.declare import option
from effdepth.options.defaults import (
    DEFAULTS,
    PASSAGE_DEFAULTS,
    POOLINGS,
    PROTOCOLS,
    STATES,
    check_protocol,
    resolve_defaults,
)

__all__ = [
    "AnalysisOptions",
    "DEFAULTS",
    "LoadOptions",
    "Options",
    "PASSAGE_DEFAULTS",
    "POOLINGS",
    "PROTOCOLS",
    "RunOptions",
    "STATES",
    "UNHASHED_OPTIONS",
    "at_least",
    "check_device",
    "check_dtype",
    "check_protocol",
    "check_revision_target",
    "check_tokenizer_spec",
    "option",
    "parse_bytes",
    "resolve_defaults",
    "validate_options",
]

MODEL_HELP = (
    "Hugging Face id, local folder, .gguf file, or an embedded model by name: smollm2-135m "
    "(SmolLM2-135M-Instruct, the default) or gemma-3-270m (Gemma-3-270m base)"
)


@dataclass(frozen=True)
class LoadOptions:
    """What to load: the model, its revision, the corpus and how it is cut into sequences.

    >>> LoadOptions(seq_len=16).seq_len
    16
    """

    model: object = option(None, MODEL_HELP, flags=(), nargs="?")
    revision: str | None = option(None, "model revision (branch, tag or commit) on the hub")
    corpus: object = option(None, "shakespeare (default), a text/JSONL file or folder, or hf:NAME[:CONFIG[:SPLIT]]")
    tokenizer: object = option(
        None,
        "tokenizer for text corpora when the model has none (or another): a folder, a Hugging Face id or a .gguf file",
        metavar="PATH_OR_ID",
    )
    seq_len: int = option(
        DEFAULTS["seq_len"],
        f"tokens per passage at most, special tokens included (default {PASSAGE_DEFAULTS['seq_len']}; "
        f"{DEFAULTS['seq_len']} with --pooling none)",
        kind="int",
        cli_default=None,
    )
    num_seqs: int = option(
        DEFAULTS["num_seqs"],
        f"passages (default {PASSAGE_DEFAULTS['num_seqs']}; {DEFAULTS['num_seqs']} with --pooling none)",
        flags=("--num-seqs", "--num-passages"),
        kind="int",
        cli_default=None,
    )
    seed: int = option(DEFAULTS["seed"], "the passages' draw (and, in the analysis, the resamples)", cli=False)
    add_bos: bool = option(True, "the same as --bos never", flags=("--no-bos",), kind="no-flag")
    bos: str = option(
        "auto",
        "special tokens as the tokenizer adds them (auto, default), BOS always first, or none",
        choices=BOS_CHOICES,
        cli_default=None,
    )
    passage_split: str = option(
        "windows",
        "windows (default): each document cut into consecutive windows of exactly --seq-len tokens (equal "
        "lengths: no first-token x length confound); paragraphs: documents cut on the text at blank lines, packed "
        "into at most --seq-len less 3 bytes, so every tokenizer gets the same passages (models with different "
        "tokenizers pair); document: each document's first tokens (--protocol paper)",
        choices=SPLITS,
        cli_default=None,
    )
    dtype: object = option(None, "float32, bfloat16 or float16 (default: float32 on CPU, bfloat16 on CUDA)")
    device: str | None = option(None, "cpu, cuda or cuda:N (default: cuda when available)")
    device_map: str | None = option(None, "'auto' to spread a large model over the GPUs (accelerate)")
    trust_remote_code: bool = option(False, "allow the model repository's own code to run", kind="flag")
    allow_pickle: bool = option(False, "allow pickle (.bin) weights; safetensors are required otherwise", kind="flag")
    blocks_path: str | None = option(None, "attribute path of the decoder blocks, for models outside the registry")
    embedding_path: str | None = option(None, "attribute path of the token embedding, with --blocks-path")
    allow_long: bool = option(False, "allow --seq-len beyond the positions the model's config states", kind="flag")
    allow_processed: bool = option(
        False,
        "measure a TransformerLens model whose writing weights were centred (not the model's own stream)",
        cli=False,
    )

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
    """How to analyse the states: views (``"paper"`` expanded), similarity, references, intervals.

    >>> AnalysisOptions(views="paper").views[:2], AnalysisOptions(pooling="none", tokens_per_passage=8).tokens_per_passage
    (('default', 'drop-pos0'), 8)
    """

    views: tuple = option(
        ("default",),
        "comma-separated views, or 'paper': default, drop-pos0, drop-bos, length, token-norm, top{k}pc and their "
        "'+' compositions (paper = default,drop-pos0,token-norm,top1pc,top3pc; drop-pos0 and length are measured "
        "in every passage-mean result, as controls; --pooling none has no length views)",
        cli_default="default",
    )
    similarity: tuple | None = option(
        None,
        f"{similarity_choices()}, a comma list (the first is the primary), or all. Every one comes from the same "
        "forward passes",
        metavar="NAME[,NAME...]|all",
    )
    pooling: str = option(
        "mean",
        "how a passage gives its samples: mean (default): one per passage, each layer mean-pooled and compared "
        "across passages (the paper's protocol); none: its tokens (see --tokens-per-passage), compared across "
        "every token of every passage",
        choices=POOLINGS,
        cli_default=None,
    )
    tokens_per_passage: int | None = option(
        None,
        "with --pooling none: K tokens per passage drawn under --seed (default: every token)",
        kind="int",
        metavar="K",
    )
    states: str = option(
        "blocks",
        "blocks (default): hooks on the decoder blocks, before the final norm; hidden: transformers' "
        "hidden_states[1:], whose last entry is the final norm's output (the paper's convention)",
        choices=STATES,
        cli_default=None,
    )
    include_embedding: bool = option(False, "analyse S_0..S_L (N = L+1) instead of S_1..S_L", kind="flag")
    bootstrap: int = option(
        DEFAULTS["bootstrap"],
        "bootstrap resamples over passages (whole passages, their tokens too), 0 to skip (default {default})",
        kind="int",
    )
    seed: int = option(
        DEFAULTS["seed"],
        "seed for the passages' draw, the token reduction and the bootstrap (default {default})",
        kind="int",
    )
    batch_size: int = option(DEFAULTS["batch_size"], "passages per forward pass (default {default})", kind="int")
    surrogate_seqs: int | None = option(
        None,
        "the calibrated references (surrogate streams of the measured covariances): all (default) or 0 to skip",
        metavar="K|all",
    )
    max_memory: int = option(
        numerics_analysis.DEFAULT_BUDGET_BYTES,
        "memory the analysis may hold, e.g. 64GiB (default {default}): its Gram tiles or cross-products, unit sums and "
        "the layers it keeps (more memory, fewer passes over the stored samples; the same numbers)",
        metavar="SIZE",
        cli_default="4GiB",
    )
    bootstrap_units: int = option(
        numerics_analysis.DEFAULT_BOOTSTRAP_UNITS,
        "passages are resampled in G blocks of consecutive passages, so each resample costs G^2 per layer pair "
        "whatever N (default 128; one passage per block when N <= G)",
        kind="int",
        metavar="G",
        cli_default=None,
    )
    protocol: str | None = option(
        None,
        "a named set of settings: paper = 10,000 FineWeb-Edu passages of <= 512 tokens, bfloat16, --states hidden, "
        "cka (flags given beside it win, and are recorded)",
        choices=tuple(PROTOCOLS),
    )

    def __post_init__(self):
        validate_options(
            batch_size=self.batch_size,
            bootstrap=self.bootstrap,
            seed=self.seed,
            pooling=self.pooling,
            states=self.states,
            bootstrap_units=self.bootstrap_units,
        )
        check_protocol(self.protocol)
        object.__setattr__(self, "similarity", parse_similarities(self.similarity))
        object.__setattr__(self, "views", tuple(v.name for v in numerics_views.parse_views(self.views)))
        self._check_token_reduction()
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

    def _check_token_reduction(self) -> None:
        """``tokens_per_passage`` belongs to the token reduction, and the token reduction keeps tokens, not means."""
        if self.tokens_per_passage is not None:
            if self.passages:
                raise EffdepthError(
                    "--tokens-per-passage draws tokens as samples, which --pooling none does; passage mode "
                    "(--pooling mean) takes one mean per passage: add --pooling none or leave it out"
                )
            if not is_whole(self.tokens_per_passage) or int(self.tokens_per_passage) < 1:
                raise EffdepthError(
                    f"--tokens-per-passage must be a whole number of 1 or more (or left out for every token), "
                    f"got {self.tokens_per_passage}"
                )
            object.__setattr__(self, "tokens_per_passage", int(self.tokens_per_passage))
        if not self.passages:
            length = [v.name for v in self.view_specs if v.has("length")]
            if length:
                raise EffdepthError(
                    f"view {length[0]} regresses each passage's token count out of its mean, and --pooling none "
                    "keeps tokens, not means; leave out length views"
                )

    #: The options that apply after the forward pass: ``effdepth analyse`` may change them on saved samples.
    AFTER_FORWARD = (
        "views",
        "similarity",
        "bootstrap",
        "bootstrap_units",
        "seed",
        "include_embedding",
        "surrogate_seqs",
        "max_memory",
    )

    def to_dict(self) -> dict:
        """Every analysis option, JSON-able.

        >>> AnalysisOptions(views="default,top1pc").to_dict()["views"]
        ['default', 'top1pc']
        """
        return {f.name: _describe(getattr(self, f.name)) for f in fields(self)}

    @property
    def primary_similarity(self) -> str:
        """The first similarity: the one ``result.views`` holds."""
        return self.similarity[0]

    @property
    def passages(self) -> bool:
        """Passage mode (``pooling="mean"``, the default): one sample per passage, its mean."""
        return self.pooling == "mean"

    @property
    def reduction(self):
        """What a passage gives as samples (``--pooling``): its mean, or its tokens."""
        from effdepth.numerics.sampling import sample_reduction

        return sample_reduction(self.pooling, self.tokens_per_passage, self.seed)

    @property
    def view_specs(self) -> list:
        return numerics_views.parse_views(self.views)

    def analysis_plan(self, device: str = "cpu") -> "numerics_analysis.AnalysisPlan":
        """Passage mode's analysis stage for these options.

        >>> AnalysisOptions(views="paper", bootstrap=0).analysis_plan().similarities
        ('cka', 'cka-debiased')
        """
        return numerics_analysis.AnalysisPlan(
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

    progress: bool = option(True, "hide progress bars", flags=("--no-progress",), kind="no-flag")
    checkpoint: str | Path | None = option(None, "the folder a run keeps its partial samples in", cli=False)
    resume: bool = option(False, "continue the run saved in checkpoint", cli=False)
    checkpoint_every_s: float = option(
        30.0,
        "save partial samples this often, and on Ctrl-C/SIGTERM; a rerun continues them (default {default}; "
        "sweep and trajectory: with the local executor)",
        flags=("--checkpoint-every",),
        kind="float",
        metavar="SECONDS",
    )
    #: What a checkpoint records about the run (its options and the command that continues it).
    record: dict | None = option(None, "what a checkpoint records about the run", cli=False)


_LOAD = tuple(f.name for f in fields(LoadOptions))
_ANALYSIS = tuple(f.name for f in fields(AnalysisOptions))

#: Options that do not change the numbers: left out of a sweep job's key.
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
        """From keyword arguments (those of :func:`effdepth.measure`); ``seed`` sets both parts, ``protocol``
        fills in options not given (``None`` counts as not given).

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
        if not is_token_ids(load.corpus):
            check_passage_options(load.seq_len, load.num_seqs, load.bos, load.passage_split)
            numerics_views.check_top_pcs(analysis.view_specs, load.num_seqs, 1 << 62)
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
