"""What a training callback does, whatever the training loop: fix the passages once at train start, measure
the model at the steps due through the one measurement path of ``effdepth measure`` (the same hooks, pooling
and analysis), write each step into a trajectory folder, and give the values a tracker logs.

A measurement runs the model in eval mode, without gradients, autocast or dropout, on its own random number
stream, then hands the model back as it was (training mode, gradient checkpointing, the RNG state): training
with the callback takes the same steps as training without it. A failure inside a measurement is one logged
line; training goes on.

>>> import tempfile, torch
>>> from effdepth.models.tiny import tiny_model
>>> m = tiny_model("llama").train()
>>> ids = torch.randint(0, 256, (8, 16), generator=torch.Generator().manual_seed(0))
>>> t = TrainingMeasurement(ids, every_steps=10, out=tempfile.mkdtemp())
>>> t.start(m, model_name="tiny")
>>> round(t.measure(m, step=0)["deff/D_eff_over_F_L"], 3), m.training
(0.729, True)
>>> t.due(10), t.due(15)
(True, False)
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import torch

from effdepth.errors import EffdepthError, one_line
from effdepth.options import Options, RunOptions

logger = logging.getLogger("effdepth")

#: A callback's measurement is cheap by default: passages of a training run's usual length, fewer of them than
#: ``measure`` takes, no bootstrap (a trajectory's step differences are paired by its own resamples).
CALLBACK_DEFAULTS = {"num_seqs": 128, "seq_len": 256, "bootstrap": 0}
#: The fewest passages a step is measured on: CKA across passages needs a few to mean anything.
MIN_PASSAGES = 4
#: Options of ``measure`` a callback refuses: it measures the model being trained, where and as it is (a cast or
#: a move would change the training), on the passages given as its first argument.
NOT_OPTIONS = ("model", "corpus", "revision", "dtype", "device", "device_map")
#: The trainer's evaluation dataset as the passages.
EVAL = "eval"


class TrainingMeasurement:
    """D_eff at the steps of one training run (see the module); the callbacks call :meth:`start`, :meth:`due`,
    :meth:`measure` and :meth:`finish`.

    ``passages``: a corpus as ``measure`` takes it (``"shakespeare"``, a file, ``hf:NAME``, texts), token ids
    (a tensor, or ``{"input_ids", "attention_mask"}``), or ``"eval"`` for the trainer's evaluation dataset (its
    first ``num_seqs`` rows, cut to ``seq_len``). ``every_steps``: measure every that many optimizer steps, and at
    the start (``at_start``) and end (``at_end``) of training. ``out``: the trajectory folder (the callbacks
    default to ``effdepth/`` in the run's output folder). ``tokens_per_step`` gives ``tokens_seen`` where the
    training loop does not count it. ``options``: the measurement options of :func:`effdepth.measure`
    (:data:`CALLBACK_DEFAULTS` where not given), checked here, before training starts.
    """

    def __init__(
        self,
        passages="shakespeare",
        *,
        every_steps: int = 500,
        out=None,
        at_start: bool = True,
        at_end: bool = True,
        tokens_per_step: int | None = None,
        figures: bool = True,
        **options,
    ):
        if isinstance(every_steps, bool) or not isinstance(every_steps, int) or every_steps < 1:
            raise EffdepthError(
                f"every_steps must be a whole number of optimizer steps >= 1, got {every_steps!r}; "
                "every_steps=500 measures every 500 steps"
            )
        if tokens_per_step is not None and (not isinstance(tokens_per_step, int) or tokens_per_step < 1):
            raise EffdepthError(f"tokens_per_step must be a whole number >= 1, got {tokens_per_step!r}")
        for name in NOT_OPTIONS:
            if name in options:
                raise EffdepthError(
                    f"{name}= is not an option of a training callback: it measures the model being trained, in "
                    "its own dtype and on its own device, on the passages given as its first argument"
                )
        self.passages, self.every_steps, self.out = passages, every_steps, out
        self.at_start, self.at_end, self.tokens_per_step, self.figures = at_start, at_end, tokens_per_step, figures
        self.values = {**CALLBACK_DEFAULTS, **options}
        corpus = None if _is_eval(passages) else passages
        self.options = Options.build(corpus=corpus, **self.values)  # bad options fail before training starts
        self.prepared = None
        self.trajectory = None
        self.attempted = set()  # the steps measured or failed in this run: a failed step is not tried again

    # ------------------------------------------------------------------ train start

    def start(
        self,
        model,
        *,
        tokenizer=None,
        eval_dataset=None,
        step: int = 0,
        resumed: bool = False,
        output_dir=None,
        model_name: str | None = None,
        run: dict | None = None,
        writes: bool = True,
    ) -> None:
        """Fix the passages and check the model, before the first step: blocks effdepth cannot find, passages
        beyond the model's context, too few passages or weights whose pooling would overflow fail here, in one
        line. ``tokenizer``: the training loop's, for a text corpus (a ``tokenizer=`` option wins). ``resumed``:
        training resumed at ``step`` from a checkpoint (the trajectory there is extended). ``writes``: whether this
        process measures and writes the trajectory (rank 0 under DDP; every rank checks alike, so bad input stops
        them all)."""
        from effdepth.measurement import prepare
        from effdepth.measurement.run import hidden_size, measurement_plan
        from effdepth.scale.trajectory.training import TrainingTrajectory

        _check_dtype(model)
        corpus = eval_passages(eval_dataset, self.options.load) if _is_eval(self.passages) else self.passages
        tokenizer = self.options.load.tokenizer if self.options.load.tokenizer is not None else tokenizer
        load = self.options.replace(model=model, corpus=corpus, tokenizer=tokenizer).load
        with as_it_was(model):  # loading a model for measurement puts it in eval mode
            prepared = prepare(load, progress=False)
        passages = prepared.tokens
        if passages.num_passages < MIN_PASSAGES:
            raise EffdepthError(
                f"{passages.num_passages} passage(s) to measure D_eff on; CKA across passages needs at least "
                f"{MIN_PASSAGES}: give more (num_seqs=, or a larger eval dataset)"
            )
        # What the analysis would refuse, refused now rather than at the first measured step.
        measurement_plan(passages, prepared.arch.num_layers, hidden_size(prepared.lm), self.options.analysis)
        self.prepared, self.attempted = prepared, set()
        if not writes:
            return
        name = model_name or getattr(model, "name_or_path", None) or type(model).__name__
        out = Path(self.out) if self.out is not None else Path(output_dir or ".") / "effdepth"
        self.trajectory = TrainingTrajectory.open(
            out,
            model=str(name),
            options=self.record(),
            passages_sha256=passages.sha256,
            run={**(run or {}), "output_dir": None if output_dir is None else str(output_dir)},
            resume_step=step if resumed else None,
        )

    def record(self) -> dict:
        """The options as a trajectory records them (the passages as named, token ids by their digest)."""
        corpus = self.passages if isinstance(self.passages, str) else None
        return {**self.values, "passages": corpus, "every_steps": self.every_steps}

    # ------------------------------------------------------------------ steps

    def due(self, step: int, *, first: bool = False, last: bool = False) -> bool:
        """Whether ``step`` is measured: every ``every_steps``, the first and last steps as asked, never twice."""
        if step in self.attempted or (self.trajectory is not None and self.trajectory.has(step)):
            return False
        return (first and self.at_start) or (last and self.at_end) or (not first and step % self.every_steps == 0)

    def measure(self, model, step: int, *, tokens_seen: int | None = None, final: bool = False) -> dict | None:
        """Measure ``model`` at ``step`` into the trajectory; the values to log, or ``None`` (one logged line)
        when the measurement failed. Training mode, gradients and RNG state are as they were afterwards."""
        from effdepth.measurement.run import measure_passages

        if self.prepared is None:
            raise EffdepthError("TrainingMeasurement.measure before start(): the passages are fixed at train start")
        self.attempted.add(step)
        if tokens_seen is None and self.tokens_per_step is not None:
            tokens_seen = step * self.tokens_per_step
        try:
            with as_it_was(model), measuring(model):
                result = measure_passages(self.prepared, self.options.analysis, run=RunOptions(progress=False))
            values = logged_values(result)
            self.trajectory.add(step, result, tokens_seen=tokens_seen, final=final)
            return values
        except Exception as exc:  # a diagnostic never stops a training run
            logger.warning("effdepth: no D_eff at step %d: %s; training goes on", step, one_line(exc))
            return None

    def finish(self, last_step: int | None = None) -> None:
        """Once training ends: each step's paired difference to the one before and the trajectory's figure (its
        tables are written at every step); ``last_step``, where measured, is marked final (training may stop
        early, after that step was measured)."""
        if self.trajectory is not None:
            try:
                self.trajectory.finish(figures=self.figures, last_step=last_step)
            except Exception as exc:
                logger.warning("effdepth: the trajectory was not completed: %s", one_line(exc))


# ---------------------------------------------------------------------- the model as it was


@contextlib.contextmanager
def as_it_was(model):
    """Hand ``model`` back in the mode it came in (training or eval), whatever happens inside."""
    modes = {name: m.training for name, m in model.named_modules()}
    try:
        yield model
    finally:
        for name, m in model.named_modules():
            m.train(modes.get(name, m.training))


@contextlib.contextmanager
def measuring(model):
    """Eval mode, no gradients, no autocast, and a forked RNG: a measurement leaves no trace on training."""
    device = next(model.parameters()).device
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        with torch.autocast(device_type=device.type, enabled=False):
            model.eval()
            yield model


def logged_values(result, prefix: str = "deff") -> dict:
    """What a tracker logs of a result, under the primary similarity: D_eff, D_eff/F_L and its null's ratio (the
    estimator's own null over F_L), the debiased estimator's, and D_eff/F_L of every other view and control.

    >>> import torch, effdepth
    >>> from effdepth.models.tiny import tiny_model
    >>> ids = torch.randint(0, 256, (8, 16), generator=torch.Generator().manual_seed(0))
    >>> r = effdepth.measure(tiny_model("llama"), ids, bootstrap=0, progress=False)
    >>> sorted(logged_values(r))
    ['deff/D_eff', 'deff/D_eff_over_F_L', 'deff/debiased/D_eff_over_F_L', 'deff/debiased/null_over_F_L', 'deff/drop-pos0/D_eff_over_F_L', 'deff/length/D_eff_over_F_L', 'deff/null_over_F_L']
    """
    primary = result.primary_similarity
    values = _headline(result.similarities[primary], prefix)
    debiased = "cka-debiased"
    if debiased != primary and debiased in result.similarities:
        values.update(_headline(result.similarities[debiased], f"{prefix}/debiased", deff=False))
    for name, view in result.similarities[primary].items():
        if name != "default":
            values[f"{prefix}/{name}/D_eff_over_F_L"] = view.ratio
    controls = ((result.extras or {}).get("confounds") or {}).get(primary) or {}
    for name, control in controls.items():
        if name != "default" and isinstance(control, dict) and control.get("ratio") is not None:
            values.setdefault(f"{prefix}/{name}/D_eff_over_F_L", control["ratio"])
    return {k: float(v) for k, v in values.items() if v is not None}


def _headline(views: dict, prefix: str, deff: bool = True) -> dict:
    view = views["default"]
    values = {f"{prefix}/D_eff": view.deff} if deff else {}
    values[f"{prefix}/D_eff_over_F_L"] = view.ratio
    null = view.references.get("structural_cal")
    if null is not None:
        values[f"{prefix}/null_over_F_L"] = null / view.reference
    return values


# ---------------------------------------------------------------------- passages and checks


def eval_passages(dataset, load) -> dict:
    """The first ``num_seqs`` rows of an evaluation dataset as token ids, each cut to ``seq_len`` and without its
    padding (by its ``attention_mask`` where it has one)."""
    if dataset is None:
        raise EffdepthError(
            "passages='eval' measures on the trainer's evaluation dataset, but the trainer has none; give it an "
            "eval_dataset, or give the callback a corpus ('shakespeare', a file, texts) or token ids"
        )
    rows = []
    for i in range(min(len(dataset), load.num_seqs)):
        row = dataset[i]
        if not isinstance(row, dict) or "input_ids" not in row:
            have = ", ".join(map(str, row)) if isinstance(row, dict) else type(row).__name__
            raise EffdepthError(
                f"the evaluation dataset's rows have no input_ids (they hold {have}); tokenise it before training "
                "(dataset.map(tokenizer)), or give the callback a corpus or token ids"
            )
        ids = torch.as_tensor(row["input_ids"]).reshape(-1)
        if "attention_mask" in row:
            ids = ids[torch.as_tensor(row["attention_mask"]).reshape(-1).bool()]
        rows.append(ids[: load.seq_len])
    width = max((len(r) for r in rows), default=0)
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, ids in enumerate(rows):
        input_ids[i, : len(ids)], mask[i, : len(ids)] = ids, 1
    return {"input_ids": input_ids, "attention_mask": mask}


def _is_eval(passages) -> bool:
    return isinstance(passages, str) and passages == EVAL


def _check_dtype(model) -> None:
    dtype = next(model.parameters()).dtype
    if dtype == torch.float16:
        raise EffdepthError(
            "the model's weights are float16, whose range the residual stream's massive activations overflow when "
            "pooled; train in bfloat16 or float32 (fp16 mixed precision keeps float32 weights and is fine)"
        )


__all__ = ["TrainingMeasurement", "logged_values", "eval_passages", "as_it_was", "measuring"]
