"""Trained control for the residual carry (docs/method.md#residual-carry): small models trained from scratch with a fixed carry.

Every run trains the same tiny Llama-architecture model (byte vocabulary,
identical initialisation and data order for a given seed) with one change:
every block (or the chosen ones) outputs ``lam * s_{l-1} + (s_l - s_{l-1})``,
applied by the same :class:`~effdepth.capture.intervention.ResidualCarry` (or, with
``carry_on="sublayers"``, :class:`~effdepth.capture.intervention.SublayerCarry`)
hooks the in-model intervention uses. Gradients flow through them.

Checkpoints are standard Hugging Face folders (model and tokenizer),
``DIR/lam-<lam>/seed-<k>/step-<N>/``, with the carry stored in the config as
``effdepth_carry`` and ``effdepth_carry_layers``. The carry is not part of the
Llama code: a plain ``effdepth measure`` (or ``from_pretrained``) of such a
checkpoint runs it with lam = 1, a different model from the one trained.
:func:`measure_checkpoint` reads the stored carry and applies it; this
experiment measures every checkpoint that way, on held-out sequences that
no training batch contains.

Runs are deterministic under a seed on the CPU (``torch.manual_seed`` before
initialisation, a seeded data order, the same held-out draw for every run);
on a GPU, kernels may differ in the last bits between runs.

Results: ``DIR/experiment.json`` (every checkpoint's numbers and the
per-(lam, step) summary over seeds) and ``DIR/experiment.{png,pdf}``; each
checkpoint's full result is in ``DIR/lam-<lam>/seed-<k>/results/step-<N>.json``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..capture.intervention import carry_hooks, check_carry_on, format_carry, parse_carry, parse_layers
from ..capture.registry import resolve_architecture
from ..errors import EffdepthError
from ..options import DEFAULT_SIMILARITY
from ..provenance import code_version, library_versions, machine, now
from ..result import Result
# The result itself lives in the result layer; re-exported here for ``from effdepth.experiment.carry import ...``.
from ..results_carry import EXPERIMENT_SCHEMA as SCHEMA
from ..results_carry import SUMMARY_KEYS, ExperimentResult, load_experiment, summarise  # noqa: F401


#: What differs from the paper's S17 run even with ``--paper``: said wherever the comparison is shown.
PAPER_DIFFERENCES = ("a Llama-architecture model (RMSNorm, rotary positions, SwiGLU MLP, untied embeddings, no dropout) "
                     "where the paper trains nanoGPT (LayerNorm, learned positions, GELU MLP); bytes of the shipped "
                     "Shakespeare where the paper uses its characters (the same for ASCII text)")
#: How passage mode measures the held-out sequences, added to :data:`PAPER_DIFFERENCES` when it does.
PASSAGE_DIFFERENCE = "D_eff on held-out sequences as passages, under the biased CKA"


@dataclass
class CarryExperiment:
    """Everything that defines a carry experiment; the defaults finish in minutes on 2 CPU cores.

    >>> CarryExperiment().carries
    (1.0, 0.75, 0.5)
    """

    carries: tuple = (1.0, 0.75, 0.5)
    carry_layers: str = "all"
    carry_on: str = "blocks"  # or "sublayers": the paper's carry in every attention and MLP sublayer
    layers: int = 4
    d_model: int = 96
    heads: int = 4
    steps: int = 300
    batch_size: int = 16
    seq_len: int = 128
    lr: float = 3e-3
    warmup: int = 30
    save_every: int | None = None  # default: steps // 4
    seed: int = 0
    seeds: int = 1
    eval_seqs: int = 32
    bootstrap: int = 200
    corpus: str = "shakespeare"
    device: str | None = None
    pooling: str = "none"  # "mean": held-out sequences measured as passages (the paper's protocol)
    paper: bool = False  # the paper's S17 setting (:meth:`paper_setting`), its Table S14 shown beside ours

    @classmethod
    def paper_setting(cls, **overrides) -> "CarryExperiment":
        """The paper's S17 setting: 12 layers, n_embd 384, 6 heads, block 256, batch 64, lr 1e-3, 5,000
        iterations on Shakespeare's characters, every sublayer carried with gamma 1, 0.75, 0.5, 0.25, three
        seeds, measured in passage mode. A GPU job; see :data:`PAPER_DIFFERENCES` for what is not the paper's.

        >>> s = CarryExperiment.paper_setting(); (s.layers, s.d_model, s.heads, s.seq_len, s.batch_size, s.steps, s.carry_on)
        (12, 384, 6, 256, 64, 5000, 'sublayers')
        """
        paper = dict(carries=(1.0, 0.75, 0.5, 0.25), carry_on="sublayers", layers=12, d_model=384, heads=6, steps=5000,
                     batch_size=64, seq_len=256, lr=1e-3, warmup=100, seeds=3, eval_seqs=512, pooling="mean", paper=True)
        return cls(**{**paper, **overrides})

    def checked(self) -> "CarryExperiment":
        """A copy with carries parsed and every size validated (one-line errors)."""
        carries = parse_carry(self.carries)
        parse_layers(self.carry_layers, self.layers if _positive_int(self.layers) else None, "--carry-layers")
        check_carry_on(self.carry_on)
        if self.pooling not in ("none", "mean"):
            raise EffdepthError(f"pooling {self.pooling!r}: none (token mode) or mean (passages)")
        for name in ("layers", "d_model", "heads", "steps", "batch_size", "seeds", "eval_seqs"):
            if not _positive_int(getattr(self, name)):
                raise EffdepthError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(self, name)!r}")
        if self.d_model % self.heads or (self.d_model // self.heads) % 2:
            raise EffdepthError(f"--d-model {self.d_model} must split into --heads {self.heads} heads of even size (rotary embeddings)")
        if not (isinstance(self.seq_len, int) and self.seq_len >= 3):
            raise EffdepthError(f"--seq-len must be at least 3, got {self.seq_len!r}")
        if not (isinstance(self.seed, int) and self.seed >= 0) or not (isinstance(self.bootstrap, int) and self.bootstrap >= 0):
            raise EffdepthError("--seed and --bootstrap must be non-negative integers")
        if not (math.isfinite(float(self.lr)) and self.lr > 0):
            raise EffdepthError(f"--lr must be a positive number, got {self.lr!r}")
        if self.save_every is not None and not _positive_int(self.save_every):
            raise EffdepthError(f"--save-every must be a positive number of steps, got {self.save_every!r}")
        if not (isinstance(self.warmup, int) and self.warmup >= 0):
            raise EffdepthError(f"--warmup must be a non-negative number of steps, got {self.warmup!r}")
        return CarryExperiment(**{**asdict(self), "carries": carries})

    def paper_differences(self) -> list:
        """How this setting differs from the paper's S17 run, one phrase per difference (carry per block
        or per sublayer, token or passage mode, carry values, seeds, sizes, training), then what differs
        even with ``--paper`` (:data:`PAPER_DIFFERENCES`).

        >>> CarryExperiment().paper_differences()[:2]
        ['one carry per block (the paper: in every attention and MLP sublayer)', 'held-out sequences in token mode, cka per sequence (the paper: as passages, cka across passages)']
        >>> len(CarryExperiment.paper_setting().paper_differences())
        2
        """
        paper = CarryExperiment.paper_setting()
        out = []
        if self.carry_on != paper.carry_on:
            out.append("one carry per block (the paper: in every attention and MLP sublayer)")
        if self.pooling != paper.pooling:
            out.append(f"held-out sequences in token mode, {DEFAULT_SIMILARITY} per sequence (the paper: as passages, cka "
                       "across passages)")
        if str(self.carry_layers).strip().lower() != "all":
            out.append(f"the carry on blocks {self.carry_layers} only (the paper: every block)")
        if tuple(parse_carry(self.carries)) != paper.carries:
            out.append(f"gamma {', '.join(map(format_carry, parse_carry(self.carries)))} (the paper: "
                       f"{', '.join(map(format_carry, paper.carries))})")
        if self.seeds != paper.seeds:
            out.append(f"{self.seeds} seed{'s' if self.seeds != 1 else ''} per gamma (the paper: 3 for 1 and 0.75, 2 for the rest)")
        sizes = ("layers", "d_model", "heads")
        if any(getattr(self, k) != getattr(paper, k) for k in sizes):
            out.append(f"{self.layers} layers, d_model {self.d_model}, {self.heads} heads (the paper: {paper.layers} layers, "
                       f"n_embd {paper.d_model}, {paper.heads} heads)")
        training = ("steps", "batch_size", "seq_len", "lr")
        if any(getattr(self, k) != getattr(paper, k) for k in training):
            out.append(f"{self.steps:,} steps of {self.batch_size} x {self.seq_len} tokens at lr {self.lr:g} (the paper: "
                       f"{paper.steps:,} iterations of {paper.batch_size} x {paper.seq_len} at lr {paper.lr:g})")
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


# --------------------------------------------------------------------------- model and data


def carry_model_config(spec: CarryExperiment, lam: float):
    """The ``LlamaConfig`` of one run: byte vocabulary, the carry recorded as ``effdepth_carry``.

    >>> cfg = carry_model_config(CarryExperiment(), 0.5)
    >>> cfg.effdepth_carry, cfg.vocab_size, cfg.num_hidden_layers
    (0.5, 259, 4)
    """
    from transformers import LlamaConfig

    from ..data.tokenizers import BYTE_VOCAB_SIZE

    return LlamaConfig(
        vocab_size=BYTE_VOCAB_SIZE,
        hidden_size=spec.d_model,
        intermediate_size=4 * spec.d_model,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.heads,
        max_position_embeddings=spec.seq_len,
        tie_word_embeddings=False,
        bos_token_id=256,
        eos_token_id=257,
        pad_token_id=258,
        effdepth_carry=float(lam),
        effdepth_carry_layers=list(parse_layers(spec.carry_layers, spec.layers)),
        effdepth_carry_on=spec.carry_on,
    )


def new_model(spec: CarryExperiment, lam: float, seed: int):
    """A freshly initialised model: the same weights for every lam at a given seed."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(carry_model_config(spec, lam))


@dataclass
class SplitCorpus:
    """Training sequences and held-out measurement sequences that share no chunk."""

    train: torch.Tensor
    held_out: torch.Tensor
    info: dict
    train_starts: np.ndarray | None = None  # where each chunk starts in the packed token stream
    held_out_starts: np.ndarray | None = None


def split_corpus(corpus="shakespeare", *, seq_len: int, eval_seqs: int, seed: int = 0) -> SplitCorpus:
    """Every chunk of the corpus, minus ``eval_seqs`` held out for measurement.

    The held-out chunks are :func:`~effdepth.data.load_corpus`'s draw for ``seed``;
    since a larger draw is a superset of a smaller one, they are removed
    exactly from the full set of chunks.

    >>> s = split_corpus(["to be or not to be, that is the question"] * 20, seq_len=8, eval_seqs=4)
    >>> s.held_out.shape[0], s.train.shape[0] + 4 == s.info["chunks_available"]
    (4, True)
    """
    from ..data import byte_tokenizer, load_corpus

    tok = byte_tokenizer()
    held = load_corpus(corpus, tok, seq_len=seq_len, num_seqs=eval_seqs, seed=seed)
    available = held.info["chunks_available"]
    if available <= eval_seqs:
        raise EffdepthError(f"the corpus has {available} chunks of {seq_len} tokens: too few to hold out {eval_seqs} and train on the rest")
    everything = load_corpus(corpus, tok, seq_len=seq_len, num_seqs=available, seed=seed)
    taken = set(held.info["chunk_starts"])
    keep = [i for i, start in enumerate(everything.info["chunk_starts"]) if start not in taken]
    info = {"corpus": held.name, "source": held.info.get("source"), "chunks_available": available, "train_seqs": len(keep),
            "held_out_seqs": eval_seqs, "held_out_sha256": held.sha256, "seq_len": seq_len, "seed": seed}
    starts = np.asarray(everything.info["chunk_starts"])
    return SplitCorpus(everything.input_ids[keep], held.input_ids, info, starts[keep], np.asarray(held.info["chunk_starts"]))


def batch_order(num_train: int, batch_size: int, steps: int, seed: int) -> np.ndarray:
    """Row indices of every training batch, ``(steps, batch_size)``: epochs of seeded permutations.

    >>> batch_order(5, 2, 3, 0).shape
    (3, 2)
    """
    rng = np.random.default_rng(seed)
    need = steps * batch_size
    epochs = [rng.permutation(num_train) for _ in range(-(-need // num_train))]
    return np.concatenate(epochs)[:need].reshape(steps, batch_size)


def lr_factor(step: int, warmup: int, steps: int) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak.

    >>> lr_factor(0, 10, 100) < lr_factor(10, 10, 100) == 1.0
    True
    """
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


# --------------------------------------------------------------------------- checkpoints


def save_checkpoint(model, folder: Path) -> Path:
    """``save_pretrained`` of the model and the byte tokenizer, swapped into place whole."""
    from ..data import byte_tokenizer

    from transformers.utils import logging as hf_logging

    folder = Path(folder)
    staging = folder.with_name(f".{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a "writing shards" bar per checkpoint would break the training bar
    try:
        model.save_pretrained(staging)
        byte_tokenizer().save_pretrained(staging)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise EffdepthError(f"cannot write checkpoint {folder}: {exc.strerror or exc}; choose another --out") from None
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return folder


def checkpoint_carry(path) -> tuple:
    """``(lam, layers)`` stored in a checkpoint's config; ``(1.0, "all")`` for an ordinary model.

    >>> import tempfile
    >>> d = tempfile.mkdtemp(); carry_model_config(CarryExperiment(), 0.5).save_pretrained(d)
    >>> checkpoint_carry(d)
    (0.5, [1, 2, 3, 4])
    """
    config_file = Path(path) / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return 1.0, "all"
    return float(config.get("effdepth_carry", 1.0)), config.get("effdepth_carry_layers") or "all"


def checkpoint_carry_on(path) -> str:
    """Where a checkpoint's carry acts: ``blocks`` (also for checkpoints that do not say) or ``sublayers``."""
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return "blocks"
    return str(config.get("effdepth_carry_on") or "blocks")


def measure_checkpoint(path, corpus=None, *, carry: float | None = None, layers=None, progress: bool = True, **options) -> Result:
    """Measure a checkpoint with the residual carry it was trained with (from its config).

    ``carry``/``layers`` override the stored values; ``options`` are
    :func:`effdepth.measure`'s. The next-token loss is recorded too.

    >>> import tempfile, torch
    >>> d = save_checkpoint(new_model(CarryExperiment(layers=2, d_model=16, heads=2), 0.5, 0), Path(tempfile.mkdtemp()) / "m")
    >>> r = measure_checkpoint(d, torch.randint(0, 256, (2, 8)), bootstrap=0, progress=False)
    >>> r.extras["intervention"]["carry"]
    0.5
    """
    from ..intervene import measure_with_carry
    from ..measure import prepare
    from ..options import Options, token_mode

    stored_lam, stored_layers = checkpoint_carry(path)
    lam = stored_lam if carry is None else carry
    passages = options.get("pooling") == "mean"
    opts = Options.build(model=str(path), corpus=corpus,
                         **(options if passages else token_mode(options, "the carry experiment")))
    prepared = prepare(opts.load, progress=progress, passages=passages)
    return measure_with_carry(prepared, lam, stored_layers if layers is None else layers, opts.analysis, progress=progress,
                              on=checkpoint_carry_on(path))


# --------------------------------------------------------------------------- training


def run_folder(lam: float, seed: int) -> str:
    """``lam-<lam>/seed-<k>``.

    >>> run_folder(0.75, 2)
    'lam-0.75/seed-2'
    """
    return f"lam-{format_carry(lam)}/seed-{seed}"


def train_run(spec: CarryExperiment, lam: float, seed: int, data: SplitCorpus, out: Path, *, progress: bool = True) -> list:
    """Train one model with carry ``lam`` from seed ``seed``; save, and measure every checkpoint.

    Returns one record per checkpoint (the numbers that go into ``experiment.json``).
    """
    from ..models import resolve_device

    device = resolve_device(spec.device)
    model = new_model(spec, lam, seed).to(device)
    arch = resolve_architecture(model)
    layers = parse_layers(spec.carry_layers, spec.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, spec.warmup, spec.steps))
    order = torch.as_tensor(batch_order(data.train.shape[0], spec.batch_size, spec.steps, seed))
    folder = Path(out) / run_folder(lam, seed)
    records, step, losses = [], 0, []
    bar = tqdm(total=spec.steps, desc=f"train carry={format_carry(lam)} seed={seed}", unit="step", disable=not progress,
               dynamic_ncols=True)
    try:
        for stop in spec.checkpoint_steps():
            model.train()
            with carry_hooks(arch, lam, layers, on=spec.carry_on):
                while step < stop:
                    loss = _train_step(model, data.train[order[step]].to(device), optimizer, schedule)
                    if not math.isfinite(loss):
                        raise EffdepthError(f"training diverged (loss {loss}) at step {step + 1} with carry {format_carry(lam)}, seed {seed}; lower --lr")
                    losses.append(loss)
                    step += 1
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
            segment, losses = losses, []
            records.append(_checkpoint_record(spec, model, lam, seed, step, segment, data, folder, out))
    finally:
        bar.close()
    return records


def _train_step(model, ids: torch.Tensor, optimizer, schedule) -> float:
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def _checkpoint_record(spec, model, lam, seed, step, train_losses, data, folder: Path, out: Path) -> dict:
    from ..intervene import intervention_row

    model.eval()
    ckpt = save_checkpoint(model, folder / f"step-{step}")
    # Measured from the saved folder, as a user would: proves the checkpoint round-trips.
    how = {"pooling": "mean", "seq_len": spec.seq_len, "num_seqs": int(data.held_out.shape[0])} if spec.pooling == "mean" else {}
    # No surrogate streams: the experiment compares carries, not a model with its references.
    result = measure_checkpoint(ckpt, data.held_out, bootstrap=spec.bootstrap, seed=spec.seed, batch_size=16, dtype="float32",
                                device=spec.device, progress=False, surrogate_seqs=0, **how)
    result_path = result.save(folder / "results" / f"step-{step}.json")
    row = intervention_row(lam, result)
    row.pop("view")
    ratio = result.default.update_norm_ratio
    row["norm_ratio"] = float(np.mean(ratio)) if ratio else None  # mean over layers of |f_l| / |h_{l-1}|
    row["num_states"] = result.default.num_states
    return {
        "lam": float(lam),
        "seed": seed,
        "step": step,
        "train_loss": float(np.mean(train_losses)) if train_losses else None,
        **row,
        "checkpoint": ckpt.relative_to(out).as_posix(),
        "result": result_path.relative_to(out).as_posix(),
    }


# --------------------------------------------------------------------------- the experiment


def carry_experiment(spec: CarryExperiment | None = None, out="runs/carry-experiment", *, progress: bool = True,
                     **overrides) -> ExperimentResult:
    """Train one model per (lam, seed), measure every checkpoint with its carry, save the summary.

    ``overrides`` are :class:`CarryExperiment` fields (``carries``, ``steps``, ``layers``...).

    >>> import tempfile
    >>> r = carry_experiment(out=tempfile.mkdtemp(), carries=(1, 0.5), layers=2, d_model=16, heads=2, steps=2,
    ...                      seq_len=16, batch_size=2, eval_seqs=2, bootstrap=0, progress=False)
    >>> [(s["lam"], s["step"]) for s in r.summary()][-1]
    (0.5, 2)
    """
    spec = CarryExperiment(**{**asdict(spec or CarryExperiment()), **overrides}).checked()
    out = Path(out)
    started = time.perf_counter()
    data = split_corpus(spec.corpus, seq_len=spec.seq_len, eval_seqs=spec.eval_seqs, seed=spec.seed)
    records = []
    for seed in spec.seed_list():
        for lam in spec.carries:
            records += train_run(spec, lam, seed, data, out, progress=progress)
    config = {**asdict(spec), "carries": list(spec.carries), "seed_list": spec.seed_list(),
              "checkpoint_steps": spec.checkpoint_steps(), "carry_layers_resolved": list(parse_layers(spec.carry_layers, spec.layers)),
              "data": data.info, "model": "LlamaForCausalLM (byte vocabulary, untied embeddings, intermediate 4 x d_model)",
              "optimizer": "AdamW(betas=(0.9, 0.95), weight_decay=0.1), clip 1.0, linear warm-up then cosine to 10%",
              "similarity": "cka" if spec.pooling == "mean" else DEFAULT_SIMILARITY,
              "paper_differences": spec.paper_differences(),
              "measured_with": f"the checkpoint's own carry (effdepth_carry in its config), "
                               + ("held-out sequences as passages, cka across passages" if spec.pooling == "mean"
                                  else f"{DEFAULT_SIMILARITY} similarity") + ", default view"}
    provenance = {"code": code_version(), "libraries": library_versions(), "machine": machine(), "created": now(),
                  "elapsed_s": round(time.perf_counter() - started, 3)}
    result = ExperimentResult(config, records, provenance)
    save_experiment(result, out)
    return result


def save_experiment(result: ExperimentResult, folder, figure: bool = True) -> Path:
    """Write ``experiment.json`` (:meth:`ExperimentResult.save`), then ``experiment.{png,pdf}``, atomically.

    >>> import tempfile
    >>> recs = [{"lam": lam, "seed": 0, "step": step, "deff": 1.2, "deff_ci": None, "reference": 1.6, "reference_matched": 1.4,
    ...          "loss": 2.0} for lam in (1.0, 0.5) for step in (0, 4)]
    >>> p = save_experiment(ExperimentResult({"layers": 2, "d_model": 16}, recs), tempfile.mkdtemp())
    >>> sorted(f.name for f in p.parent.iterdir())
    ['experiment.json', 'experiment.pdf', 'experiment.png']
    """
    path = result.save(folder)
    if figure:
        from ..report.figures_experiment import experiment_figure
        from ..report.style import save_figure

        save_figure(experiment_figure(result), Path(folder) / "experiment")
    return path


def _positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1
