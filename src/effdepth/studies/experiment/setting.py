"""A carry experiment's setting, checked once, and how it differs from the paper's S17 setting."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from effdepth.errors import EffdepthError
from effdepth.options import option
from effdepth.studies.intervene.hooks import CARRY_ON, check_carry_on, format_carry, parse_carry, parse_layers

#: What differs from the paper's S17 run even with ``--paper``: said wherever the comparison is shown.
PAPER_DIFFERENCES = (
    "a Llama-architecture model (RMSNorm, rotary positions, SwiGLU MLP, untied embeddings, no dropout) "
    "where the paper trains nanoGPT (LayerNorm, learned positions, GELU MLP); bytes of the shipped "
    "Shakespeare where the paper uses its characters (the same for ASCII text)"
)
#: How passage mode measures the held-out sequences, added to :data:`PAPER_DIFFERENCES` when it does.
PASSAGE_DIFFERENCE = "D_eff on held-out sequences as passages, under the biased CKA"


#: The carry values an experiment trains unless told otherwise.
DEFAULT_CARRIES = (1.0, 0.75, 0.5)


def _carry_list(carries: tuple) -> str:
    return ",".join(f"{x:g}" for x in carries)


@dataclass
class CarryExperiment:
    """Everything that defines a carry experiment; the defaults finish in minutes on 2 CPU cores.

    >>> CarryExperiment().carries
    (1.0, 0.75, 0.5)
    """

    carries: tuple = option(
        DEFAULT_CARRIES,
        f"carry values in [0, 1], comma-separated (default {_carry_list(DEFAULT_CARRIES)})",
        flags=("--carry",),
        metavar="CARRY[,CARRY...]",
        cli_default=_carry_list(DEFAULT_CARRIES),
    )
    carry_layers: str = option("all", "blocks that get the carry: all (default), A-B or a list")
    carry_on: str = option(
        "blocks",
        "blocks (default) or sublayers (the paper's: every attention and MLP sublayer)",
        choices=CARRY_ON,
    )
    layers: int = option(4, "number of blocks (default 4)", kind="int")
    d_model: int = option(96, "hidden size (default 96)", kind="int")
    heads: int = option(4, "attention heads (default 4)", kind="int")
    steps: int = option(300, "training steps (default 300)", kind="int")
    batch_size: int = option(16, "sequences per step (default 16)", kind="int")
    seq_len: int = option(128, "tokens per sequence, BOS included (default 128)", kind="int")
    lr: float = option(3e-3, "peak learning rate (default 0.003)", kind="float")
    warmup: int = option(30, "warm-up steps (default 30)", kind="int")
    save_every: int | None = option(
        None, "checkpoint interval in steps (default: steps / 4; step 0 and the last are always saved)", kind="int"
    )
    seed: int = option(0, "first seed: initialisation, data order, held-out draw (default 0)", kind="int")
    seeds: int = option(1, "number of seeds per carry value, for intervals over seeds (default 1)", kind="int")
    eval_seqs: int = option(32, "held-out sequences measured at each checkpoint (default 32)", kind="int")
    bootstrap: int = option(200, "bootstrap resamples per measurement (default 200)", kind="int")
    corpus: str = option(
        "shakespeare", "training and held-out text: shakespeare (default), a text/JSONL file or folder"
    )
    device: str | None = option(None, "cpu, cuda or cuda:N (default: cuda when available)")
    pooling: str = option(
        "mean",
        "held-out sequences measured as passages (mean, the paper's) or with their tokens as samples (none)",
        cli=False,
    )
    paper: bool = option(
        False,
        "the paper's S17 setting (12 layers, n_embd 384, 6 heads, block 256, batch 64, lr 1e-3, 5,000 steps, "
        "gamma 1,0.75,0.5,0.25, every sublayer, 3 seeds, measured as passages) and its Table S14 beside ours; "
        "a GPU job. Options typed with it override single values",
        kind="flag",
    )

    @classmethod
    def paper_setting(cls, **overrides) -> "CarryExperiment":
        """The paper's S17 setting (a GPU job; :data:`PAPER_DIFFERENCES` says what is not the paper's).

        >>> s = CarryExperiment.paper_setting(); (s.layers, s.d_model, s.heads, s.seq_len, s.batch_size, s.steps, s.carry_on)
        (12, 384, 6, 256, 64, 5000, 'sublayers')
        """
        paper = dict(
            carries=(1.0, 0.75, 0.5, 0.25),
            carry_on="sublayers",
            layers=12,
            d_model=384,
            heads=6,
            steps=5000,
            batch_size=64,
            seq_len=256,
            lr=1e-3,
            warmup=100,
            seeds=3,
            eval_seqs=512,
            pooling="mean",
            paper=True,
        )
        return cls(**{**paper, **overrides})

    def checked(self) -> "CarryExperiment":
        """A copy with carries parsed and every size validated (one-line errors)."""
        carries = parse_carry(self.carries)
        parse_layers(self.carry_layers, self.layers if _positive_int(self.layers) else None, "--carry-layers")
        check_carry_on(self.carry_on)
        if self.pooling not in ("none", "mean"):
            raise EffdepthError(f"pooling {self.pooling!r}: mean (passages) or none (their tokens as samples)")
        for name in ("layers", "d_model", "heads", "steps", "batch_size", "seeds", "eval_seqs"):
            if not _positive_int(getattr(self, name)):
                raise EffdepthError(
                    f"--{name.replace('_', '-')} must be a positive integer, got {getattr(self, name)!r}"
                )
        if self.eval_seqs < 4:
            raise EffdepthError(
                f"--eval-seqs {self.eval_seqs} is below 4: the held-out sequences are measured as passages, "
                "and the bootstrap and the debiased estimator need at least 4"
            )
        if self.d_model % self.heads or (self.d_model // self.heads) % 2:
            raise EffdepthError(
                f"--d-model {self.d_model} must split into --heads {self.heads} heads of even size (rotary embeddings)"
            )
        if not (isinstance(self.seq_len, int) and self.seq_len >= 3):
            raise EffdepthError(f"--seq-len must be at least 3, got {self.seq_len!r}")
        if not (isinstance(self.seed, int) and self.seed >= 0) or not (
            isinstance(self.bootstrap, int) and self.bootstrap >= 0
        ):
            raise EffdepthError("--seed and --bootstrap must be non-negative integers")
        if not (math.isfinite(float(self.lr)) and self.lr > 0):
            raise EffdepthError(f"--lr must be a positive number, got {self.lr!r}")
        if self.save_every is not None and not _positive_int(self.save_every):
            raise EffdepthError(f"--save-every must be a positive number of steps, got {self.save_every!r}")
        if not (isinstance(self.warmup, int) and self.warmup >= 0):
            raise EffdepthError(f"--warmup must be a non-negative number of steps, got {self.warmup!r}")
        return CarryExperiment(**{**asdict(self), "carries": carries})

    def paper_differences(self) -> list:
        """How this setting differs from the paper's S17 run, one phrase per difference.

        >>> CarryExperiment().paper_differences()[:2]
        ['one carry per block (the paper: in every attention and MLP sublayer)', 'gamma 1, 0.75, 0.5 (the paper: 1, 0.75, 0.5, 0.25)']
        >>> CarryExperiment(pooling="none").paper_differences()[1]
        'held-out sequences with their tokens as samples (the paper: one mean per passage)'
        >>> len(CarryExperiment.paper_setting().paper_differences())
        2
        """
        paper = CarryExperiment.paper_setting()
        out = []
        if self.carry_on != paper.carry_on:
            out.append("one carry per block (the paper: in every attention and MLP sublayer)")
        if self.pooling != paper.pooling:
            out.append("held-out sequences with their tokens as samples (the paper: one mean per passage)")
        if str(self.carry_layers).strip().lower() != "all":
            out.append(f"the carry on blocks {self.carry_layers} only (the paper: every block)")
        if tuple(parse_carry(self.carries)) != paper.carries:
            out.append(
                f"gamma {', '.join(map(format_carry, parse_carry(self.carries)))} (the paper: "
                f"{', '.join(map(format_carry, paper.carries))})"
            )
        if self.seeds != paper.seeds:
            out.append(
                f"{self.seeds} seed{'s' if self.seeds != 1 else ''} per gamma (the paper: 3 for 1 and 0.75, 2 for the rest)"
            )
        sizes = ("layers", "d_model", "heads")
        if any(getattr(self, k) != getattr(paper, k) for k in sizes):
            out.append(
                f"{self.layers} layers, d_model {self.d_model}, {self.heads} heads (the paper: {paper.layers} layers, "
                f"n_embd {paper.d_model}, {paper.heads} heads)"
            )
        training = ("steps", "batch_size", "seq_len", "lr")
        if any(getattr(self, k) != getattr(paper, k) for k in training):
            out.append(
                f"{self.steps:,} steps of {self.batch_size} x {self.seq_len} tokens at lr {self.lr:g} (the paper: "
                f"{paper.steps:,} iterations of {paper.batch_size} x {paper.seq_len} at lr {paper.lr:g})"
            )
        if self.corpus != paper.corpus:
            which = self.corpus if isinstance(self.corpus, str) else f"{len(self.corpus)} texts given in Python"
            out.append(f"corpus {which} (the paper: Shakespeare)")
        return out + [PAPER_DIFFERENCES] + ([PASSAGE_DIFFERENCE] if self.pooling == "mean" else [])

    def checkpoint_steps(self) -> list:
        """Steps with a checkpoint: 0 (the initialisation), every ``save_every``, and the last.

        >>> CarryExperiment(steps=10, save_every=4).checkpoint_steps()
        [0, 4, 8, 10]
        """
        every = self.save_every or max(1, self.steps // 4)
        return sorted(set(range(0, self.steps, every)) | {self.steps})

    def seed_list(self) -> list:
        return list(range(self.seed, self.seed + self.seeds))


def _positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1
