"""Speed on a GPU: ``measure`` against a bare bfloat16 forward of the same batches.

Builds randomly initialised models of real sizes from their configs (no
download: Pythia-1.4B and OLMo-2-7B shapes), and prints, measured in one run:
tokens per second of a bare forward (decoder stack, bfloat16, no hooks),
tokens per second of ``measure`` under frobenius (default view), cka (default
view; and with the calibrated references), cka with every view of ``--views
paper``, and ``--similarity all --views paper`` with the calibrated
references, their ratios to the bare forward (target: >= 0.90 with all views
on), and peak GPU memory of each.

    python benchmarks/gpu.py [--shapes pythia-1.4b,olmo2-7b] [--seq-len 2048] [--batch-size 8] [--batches 4]

On a machine without CUDA it says so and exits cleanly (status 0).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

SHAPES = {
    # EleutherAI/pythia-1.4b
    "pythia-1.4b": ("gpt_neox", dict(num_hidden_layers=24, hidden_size=2048, intermediate_size=8192,
                                     num_attention_heads=16, vocab_size=50304, rotary_pct=0.25,
                                     max_position_embeddings=2048)),
    # allenai/OLMo-2-1124-7B
    "olmo2-7b": ("olmo2", dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=11008,
                               num_attention_heads=32, num_key_value_heads=32, vocab_size=100352,
                               max_position_embeddings=4096)),
}


def build(shape: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, fields = SHAPES[shape]
    config = AutoConfig.for_model(model_type, **fields)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return model.eval()


def bare_forward(model, arch, batches):
    from effdepth.capture.forward import decoder_forward

    for ids in batches:
        decoder_forward(model, arch, ids, None)


def run_measure(model, batches, views, similarity="cka", surrogate_seqs=0):
    from effdepth.measure import measure

    ids = torch.cat(batches).cpu()
    return measure(model, ids, batch_size=batches[0].shape[0], views=views, similarity=similarity,
                   surrogate_seqs=surrogate_seqs, bootstrap=0, progress=False)


#: (label, views, similarity, surrogate sequences: 0 none, None all)
RUNS = (
    ("frobenius default", "default", "frobenius", 0),
    ("cka default", "default", "cka", 0),
    ("cka default + calibrated", "default", "cka", None),
    ("cka --views paper", "paper", "cka", 0),
    ("all --views paper + calibrated", "paper", "all", None),
)


def timed(fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, torch.cuda.max_memory_allocated()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="pythia-1.4b,olmo2-7b")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--batches", type=int, default=4)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA device here; run it on a machine with a GPU (nothing measured).")
        return 0
    from effdepth.capture.registry import resolve_architecture

    print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, bfloat16, "
          f"{args.batches} batches of {args.batch_size} x {args.seq_len} tokens")
    for shape in args.shapes.split(","):
        model = build(shape)
        arch = resolve_architecture(model)
        vocab = model.config.vocab_size
        gen = torch.Generator(device="cuda").manual_seed(0)
        batches = [torch.randint(0, vocab, (args.batch_size, args.seq_len), device="cuda", generator=gen) for _ in range(args.batches)]
        tokens = args.batches * args.batch_size * args.seq_len
        with torch.inference_mode():
            bare_forward(model, arch, batches[:1])  # warm-up (kernels, allocator)
        run_measure(model, batches[:1], "paper", "all", None)
        t_bare, m_bare = timed(lambda: bare_forward(model, arch, batches))
        gib = lambda b: f"{b / 2**30:.1f} GiB"
        print(f"{shape}: bare forward {tokens / t_bare:,.0f} tok/s (peak {gib(m_bare)})")
        for label, views, similarity, surrogates in RUNS:
            t, m = timed(lambda: run_measure(model, batches, views, similarity, surrogates))
            print(f"  measure {label:32s} {tokens / t:>12,.0f} tok/s = {t_bare / t:.2f} of bare (peak {gib(m)}) [target >= 0.90]")
        del model, batches
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
