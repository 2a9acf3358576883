"""``measure``: a model and a corpus -> passages -> samples -> analysis -> result.

The public entry point of a measurement; the path it runs is :mod:`effdepth.measurement.run`.
"""

from __future__ import annotations

import time
from pathlib import Path

from effdepth.measurement.prepare import Prepared, prepare, stored_carry
from effdepth.options import DEFAULTS, Options, RunOptions, validate_options
from effdepth.results.result import Result

__all__ = ["measure", "run_measurement", "prepare", "Prepared", "validate_options", "DEFAULTS"]


def measure(
    model=None,
    corpus=None,
    *,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    checkpoint_every_s: float = 30.0,
    progress: bool = True,
    **options,
) -> Result:
    """Measure the effective depth of a causal LM's residual stream.

    ``model``: a Hugging Face id, a local folder, a ``.gguf`` file, a loaded ``PreTrainedModel``, a
    TransformerLens or nnsight model (their own tokenizer the default), or ``None`` for the embedded
    SmolLM2-135M-Instruct. ``corpus``: ``None``/``"shakespeare"``, a text/JSONL file or folder,
    ``"hf:NAME[:CONFIG[:SPLIT]]"``, a list of strings, or a ``(batch, seq)`` tensor of token ids used
    exactly as given. ``options``: the fields of :class:`~effdepth.options.LoadOptions` and
    :class:`~effdepth.options.AnalysisOptions`, validated before anything loads. With ``checkpoint`` (a
    folder), an interrupted run keeps its samples there and ``resume=True`` continues it.

    >>> import effdepth, torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> lm = LlamaForCausalLM(LlamaConfig(num_hidden_layers=3, hidden_size=32, intermediate_size=64,
    ...     num_attention_heads=4, num_key_value_heads=4, vocab_size=100))
    >>> r = effdepth.measure(lm, torch.randint(0, 100, (4, 16)), bootstrap=0, progress=False)
    >>> r.default.reference
    1.5
    """
    opts = Options.build(model=model, corpus=corpus, **options)
    run = RunOptions(progress=progress, checkpoint=checkpoint, resume=resume, checkpoint_every_s=checkpoint_every_s)
    return run_measurement(opts, run)


def run_measurement(options: Options, run: RunOptions | None = None, *, check_passages=None) -> Result:
    """:func:`measure` with its options already built: load, then measure (``check_passages``: as
    :func:`~effdepth.measurement.prepare.prepare` takes it).

    >>> import torch
    >>> from effdepth.models.tiny import tiny_model
    >>> opts = Options.build(model=tiny_model("gpt2"), corpus=torch.randint(0, 256, (4, 8)), bootstrap=0)
    >>> run_measurement(opts, RunOptions(progress=False)).default.num_states
    3
    """
    from effdepth.measurement.run import measure_passages

    run = run or RunOptions()
    started = time.perf_counter()
    prepared = prepare(options.load, progress=run.progress, check_passages=check_passages)
    stored = stored_carry(prepared.lm.model)
    result = measure_passages(prepared, options.analysis, run=run, started=started)
    if stored is not None:
        result.extras["stored_carry"] = stored
    return result
