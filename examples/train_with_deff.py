"""Train a tiny LLaMA-family model on Shakespeare with the Hugging Face ``Trainer`` and watch its D_eff while it
trains, then write the trajectory's report.

    python examples/train_with_deff.py                      # 300 steps: a minute or two on 2 CPU cores
    tensorboard --logdir runs/train_with_deff/runs          # deff/... beside the loss (with tensorboard installed)
    effdepth show runs/train_with_deff/effdepth             # the trajectory: D_eff at every measured step

The model reads bytes (effdepth's byte tokenizer); the passages D_eff is measured on are held out of training
(the same passages at every step). ``DeffCallback`` measures at the start, every ``--every-steps`` steps and at the
end, logs ``deff/...`` through the Trainer's own log (so every ``report_to`` tracker receives it) and writes the
trajectory folder ``<out>/effdepth``; ``effdepth report`` then draws it against the step (``<out>/report.html``).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from effdepth.cli import main as effdepth
from effdepth.data import byte_tokenizer
from effdepth.data.tokenizers import BYTE_VOCAB_SIZE
from effdepth.integrations.transformers import DeffCallback
from effdepth.studies.experiment.training import split_corpus


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps (default 300)")
    parser.add_argument("--every-steps", type=int, default=50, help="measure D_eff every N steps (default 50)")
    parser.add_argument("--out", default="runs/train_with_deff", help="output folder (default runs/train_with_deff)")
    parser.add_argument("--layers", type=int, default=4, help="blocks (default 4)")
    parser.add_argument("--hidden", type=int, default=96, help="hidden size (default 96)")
    parser.add_argument("--seq-len", type=int, default=128, help="bytes per training sequence (default 128)")
    parser.add_argument("--batch-size", type=int, default=16, help="sequences per step (default 16)")
    parser.add_argument("--eval-seqs", type=int, default=32, help="held-out passages D_eff is measured on (default 32)")
    parser.add_argument("--no-callback", action="store_true", help="train without measuring (for the benchmark)")
    return parser.parse_args(argv)


class Chunks(torch.utils.data.Dataset):
    """Fixed-length token sequences, each its own language-modelling target."""

    def __init__(self, ids: torch.Tensor):
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_llama(args) -> LlamaForCausalLM:
    """A LLaMA of the carry experiment's scale over the byte vocabulary, freshly initialised."""
    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=BYTE_VOCAB_SIZE,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=args.seq_len,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def training_args(args) -> TrainingArguments:
    tracker = "tensorboard" if importlib.util.find_spec("tensorboard") else "none"
    return TrainingArguments(
        output_dir=args.out,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=3e-3,
        warmup_steps=max(1, args.steps // 10),
        lr_scheduler_type="cosine",
        weight_decay=0.1,
        logging_steps=max(1, min(10, args.every_steps)),
        save_strategy="no",
        report_to=tracker,
        use_cpu=True,
        seed=0,
    )


def train(args) -> Path | None:
    """Train; the trajectory folder, or ``None`` without the callback."""
    data = split_corpus("shakespeare", seq_len=args.seq_len, eval_seqs=args.eval_seqs)
    callbacks = [] if args.no_callback else [DeffCallback(data.held_out, every_steps=args.every_steps)]
    trainer = Trainer(
        model=tiny_llama(args),
        args=training_args(args),
        train_dataset=Chunks(data.train),
        processing_class=byte_tokenizer(),
        callbacks=callbacks,
    )
    trainer.train()
    return None if args.no_callback else Path(args.out) / "effdepth"


def main(argv=None) -> int:
    args = parse_args(argv)
    trajectory = train(args)
    if trajectory is None:
        return 0
    return effdepth(["report", str(trajectory), "-o", str(Path(args.out) / "report.html")])


if __name__ == "__main__":
    raise SystemExit(main())
