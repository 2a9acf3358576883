"""Trained control for the residual carry (docs/method.md#residual-carry): small models trained from scratch with a fixed carry.

Every run trains the same tiny byte-vocabulary Llama (identical initialisation and data order for a
seed) with one change: the carry hooks of :mod:`effdepth.studies.intervene.hooks`.

Checkpoints are Hugging Face folders, ``DIR/lam-<lam>/seed-<k>/step-<N>/``, the carry stored in the
config as ``effdepth_carry`` and ``effdepth_carry_layers``. The carry is not part of the Llama code: a
plain ``effdepth measure`` of such a checkpoint runs it with lam = 1, a different model from the one
trained; :func:`~.checkpoints.measure_checkpoint` applies the stored carry, on held-out sequences.

Runs are deterministic under a seed on the CPU; on a GPU, kernels may differ in the last bits.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from effdepth.report.tables import save_study
from effdepth.results.provenance import provenance_record
from effdepth.studies.experiment.result import ExperimentResult
from effdepth.studies.experiment.setting import CarryExperiment
from effdepth.studies.experiment.training import split_corpus, train_run
from effdepth.studies.intervene.hooks import parse_layers


def carry_experiment(
    spec: CarryExperiment | None = None, out="runs/carry-experiment", *, progress: bool = True, **overrides
) -> ExperimentResult:
    """Train one model per (lam, seed), measure every checkpoint with its carry, save the summary.

    ``overrides`` are :class:`CarryExperiment` fields (``carries``, ``steps``, ``layers``...).

    >>> import tempfile
    >>> r = carry_experiment(out=tempfile.mkdtemp(), carries=(1, 0.5), layers=2, d_model=16, heads=2, steps=2,
    ...                      seq_len=16, batch_size=2, eval_seqs=4, bootstrap=0, progress=False)
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
    config = {
        **asdict(spec),
        "carries": list(spec.carries),
        "seed_list": spec.seed_list(),
        "checkpoint_steps": spec.checkpoint_steps(),
        "carry_layers_resolved": list(parse_layers(spec.carry_layers, spec.layers)),
        "data": data.info,
        "model": "LlamaForCausalLM (byte vocabulary, untied embeddings, intermediate 4 x d_model)",
        "optimizer": "AdamW(betas=(0.9, 0.95), weight_decay=0.1), clip 1.0, linear warm-up then cosine to 10%",
        "similarity": "cka",
        "paper_differences": spec.paper_differences(),
        "measured_with": "the checkpoint's own carry (effdepth_carry in its config), held-out sequences as "
        + ("passages" if spec.pooling == "mean" else "passages, their tokens as samples")
        + ", cka across samples"
        + ", default view",
    }
    result = ExperimentResult(config, records, provenance_record(started=started))
    save_study(result, out)
    return result
