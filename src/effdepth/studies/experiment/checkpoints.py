"""A carry experiment's checkpoints: Hugging Face folders with the carry in their config, measured
from the saved folder with that carry, as a user would measure them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.results.result import Result


def save_checkpoint(model, folder: Path) -> Path:
    """``save_pretrained`` of the model and the byte tokenizer, swapped into place whole."""
    from transformers.utils import logging as hf_logging

    from effdepth.data import byte_tokenizer

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
    >>> from effdepth.studies.experiment import CarryExperiment
    >>> from effdepth.studies.experiment.training import carry_model_config
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


def measure_checkpoint(
    path, corpus=None, *, carry: float | None = None, layers=None, progress: bool = True, **options
) -> Result:
    """Measure a checkpoint with the residual carry it was trained with (from its config), and its loss;
    ``carry``/``layers`` override the stored values; ``options`` are :func:`effdepth.measure`'s.

    >>> import tempfile, torch
    >>> from effdepth.studies.experiment import CarryExperiment
    >>> from effdepth.studies.experiment.training import new_model
    >>> d = save_checkpoint(new_model(CarryExperiment(layers=2, d_model=16, heads=2), 0.5, 0), Path(tempfile.mkdtemp()) / "m")
    >>> r = measure_checkpoint(d, torch.randint(0, 256, (4, 8)), bootstrap=0, progress=False)
    >>> r.extras["intervention"]["carry"]
    0.5
    """
    from effdepth.measurement import prepare
    from effdepth.options import Options
    from effdepth.studies.intervene import measure_with_carry

    stored_lam, stored_layers = checkpoint_carry(path)
    lam = stored_lam if carry is None else carry
    opts = Options.build(model=str(path), corpus=corpus, **options)  # as effdepth.measure: passage mode unless told
    prepared = prepare(opts.load, progress=progress)
    return measure_with_carry(
        prepared,
        lam,
        stored_layers if layers is None else layers,
        opts.analysis,
        progress=progress,
        on=checkpoint_carry_on(path),
    )


def checkpoint_record(spec, model, lam, seed, step, train_losses, data, folder: Path, out: Path) -> dict:
    """Save ``model`` at ``step`` under ``folder``, measure it on the held-out sequences with its carry, and
    return its line of ``experiment.json`` (paths relative to the experiment's folder ``out``)."""
    from effdepth.studies.intervene import intervention_row

    model.eval()
    ckpt = save_checkpoint(model, folder / f"step-{step}")
    # Measured from the saved folder, as a user would: proves the checkpoint round-trips.
    how = {"pooling": spec.pooling, "seq_len": spec.seq_len, "num_seqs": int(data.held_out.shape[0])}
    # No surrogate streams: the experiment compares carries, not a model with its references.
    result = measure_checkpoint(
        ckpt,
        data.held_out,
        bootstrap=spec.bootstrap,
        seed=spec.seed,
        batch_size=16,
        dtype="float32",
        device=spec.device,
        progress=False,
        surrogate_seqs=0,
        **how,
    )
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
