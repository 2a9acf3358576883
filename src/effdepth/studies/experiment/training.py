"""Training one model of a carry experiment: a tiny byte-vocabulary Llama with the carry recorded in its
config, trained with the carry hooks in place, saved and measured at every checkpoint step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from effdepth.errors import EffdepthError
from effdepth.models.registry import resolve_architecture
from effdepth.studies.experiment.checkpoints import checkpoint_record
from effdepth.studies.experiment.setting import CarryExperiment
from effdepth.studies.intervene.hooks import carry_hooks, format_carry, parse_layers


def carry_model_config(spec: CarryExperiment, lam: float):
    """The ``LlamaConfig`` of one run: byte vocabulary, the carry recorded as ``effdepth_carry``.

    >>> cfg = carry_model_config(CarryExperiment(), 0.5)
    >>> cfg.effdepth_carry, cfg.vocab_size, cfg.num_hidden_layers
    (0.5, 259, 4)
    """
    from transformers import LlamaConfig

    from effdepth.data.tokenizers import BYTE_VOCAB_SIZE

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

    The held-out chunks are :func:`~effdepth.data.load_corpus`'s draw for ``seed`` (a larger draw is a
    superset of a smaller one, so they are removed exactly).

    >>> s = split_corpus(["to be or not to be, that is the question"] * 20, seq_len=8, eval_seqs=4)
    >>> s.held_out.shape[0], s.train.shape[0] + 4 == s.info["chunks_available"]
    (4, True)
    """
    from effdepth.data import byte_tokenizer, load_corpus

    tok = byte_tokenizer()
    held = load_corpus(corpus, tok, seq_len=seq_len, num_seqs=eval_seqs, seed=seed)
    available = held.info["chunks_available"]
    if available <= eval_seqs:
        raise EffdepthError(
            f"the corpus has {available} chunks of {seq_len} tokens: too few to hold out {eval_seqs} and train on the rest"
        )
    everything = load_corpus(corpus, tok, seq_len=seq_len, num_seqs=available, seed=seed)
    taken = set(held.info["chunk_starts"])
    keep = [i for i, start in enumerate(everything.info["chunk_starts"]) if start not in taken]
    info = {
        "corpus": held.name,
        "source": held.info.get("source"),
        "chunks_available": available,
        "train_seqs": len(keep),
        "held_out_seqs": eval_seqs,
        "held_out_sha256": held.sha256,
        "seq_len": seq_len,
        "seed": seed,
    }
    starts = np.asarray(everything.info["chunk_starts"])
    return SplitCorpus(
        everything.input_ids[keep], held.input_ids, info, starts[keep], np.asarray(held.info["chunk_starts"])
    )


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


def run_folder(lam: float, seed: int) -> str:
    """``lam-<lam>/seed-<k>``.

    >>> run_folder(0.75, 2)
    'lam-0.75/seed-2'
    """
    return f"lam-{format_carry(lam)}/seed-{seed}"


def train_run(
    spec: CarryExperiment, lam: float, seed: int, data: SplitCorpus, out: Path, *, progress: bool = True
) -> list:
    """Train one model with carry ``lam`` from seed ``seed``; save, and measure every checkpoint.

    Returns one record per checkpoint (the numbers that go into ``experiment.json``).
    """
    from effdepth.models.loading import resolve_device

    device = resolve_device(spec.device)
    model = new_model(spec, lam, seed).to(device)
    arch = resolve_architecture(model)
    layers = parse_layers(spec.carry_layers, spec.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, spec.warmup, spec.steps))
    order = torch.as_tensor(batch_order(data.train.shape[0], spec.batch_size, spec.steps, seed))
    folder = Path(out) / run_folder(lam, seed)
    records, step, losses = [], 0, []
    bar = tqdm(
        total=spec.steps,
        desc=f"train carry={format_carry(lam)} seed={seed}",
        unit="step",
        disable=not progress,
        dynamic_ncols=True,
    )
    try:
        for stop in spec.checkpoint_steps():
            model.train()
            with carry_hooks(arch, lam, layers, on=spec.carry_on):
                while step < stop:
                    loss = _train_step(model, data.train[order[step]].to(device), optimizer, schedule)
                    if not math.isfinite(loss):
                        raise EffdepthError(
                            f"training diverged (loss {loss}) at step {step + 1} with carry {format_carry(lam)}, seed {seed}; lower --lr"
                        )
                    losses.append(loss)
                    step += 1
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
            segment, losses = losses, []
            records.append(checkpoint_record(spec, model, lam, seed, step, segment, data, folder, out))
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
