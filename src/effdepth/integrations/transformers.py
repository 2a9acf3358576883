"""``DeffCallback`` for the Hugging Face ``Trainer``: D_eff at the start, every ``every_steps`` optimizer steps and
the end of training, logged through ``Trainer.log`` (so every ``report_to`` tracker receives the ``deff/...``
keys) and written as a trajectory folder (``effdepth/`` in the run's ``output_dir`` unless ``out=`` says).

    from effdepth.integrations.transformers import DeffCallback
    trainer = Trainer(model, args, train_dataset=..., callbacks=[DeffCallback("shakespeare", every_steps=200)])

Under DDP (torchrun, accelerate) rank 0 measures the unwrapped model on every passage and the other ranks wait at
their next collective: each step's number is the one ``effdepth measure`` gives the checkpoint, and the measurement
adds no collective to the training loop (sharing the passages between ranks would save the others' wait, one eval
forward and an analysis every ``every_steps``, at that price; docs/scale.md). Sharded models
(FSDP, DeepSpeed ZeRO-3) are refused at train start: no rank holds the whole model to measure. Bad input fails
at train start, out of ``trainer.train()``, as one line; a failed measurement is one logged warning
(docs/usage.md#during-training).
"""

from __future__ import annotations

import logging
import sys

import torch
from transformers import TrainerCallback

from effdepth.errors import EffdepthError
from effdepth.integrations.training import TrainingMeasurement

logger = logging.getLogger("effdepth")


class DeffCallback(TrainerCallback):
    """Measure D_eff while the ``Trainer`` trains; arguments as
    :class:`~effdepth.integrations.training.TrainingMeasurement` (``passages="eval"``: the trainer's
    ``eval_dataset``).

    >>> cb = DeffCallback(every_steps=0)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: every_steps must be a whole number of optimizer steps >= 1, got 0; every_steps=500 measures every 500 steps
    """

    def __init__(self, passages="shakespeare", **options):
        self.measurement = TrainingMeasurement(passages, **options)
        self.trainer = None
        self.pending = None  # the start's values, logged once the trackers have started

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.trainer = _calling_trainer(self)
        try:
            self._start(args, state, model, processing_class)
        except EffdepthError as exc:
            # Out of trainer.train() before the first step: the script shows the Trainer's frames down to here
            # and the one line, not effdepth's internals or the library errors it was raised from.
            raise EffdepthError(str(exc)) from None
        if state.is_world_process_zero and self.measurement.due(state.global_step, first=True):
            self.pending = self.measurement.measure(model, state.global_step, tokens_seen=_tokens_seen(args, state))

    def _start(self, args, state, model, processing_class) -> None:
        _check_unsharded(args)
        eval_dataset = getattr(self.trainer, "eval_dataset", None)
        if isinstance(eval_dataset, dict):  # several named eval datasets: the first
            eval_dataset = next(iter(eval_dataset.values()), None)
        self.measurement.start(
            model,
            tokenizer=getattr(processing_class, "tokenizer", processing_class),
            eval_dataset=eval_dataset,
            step=state.global_step,
            resumed=state.global_step > 0,
            output_dir=args.output_dir,
            model_name=getattr(model, "name_or_path", None) or None,
            run={"framework": "transformers", "run_name": getattr(args, "run_name", None)},
            writes=state.is_world_process_zero,
        )

    def on_step_begin(self, args, state, control, **kwargs):
        if self.pending:
            self._log(state, control, self.pending)
            self.pending = None

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero or self.measurement.prepared is None:
            return
        step = state.global_step
        last = bool(control.should_training_stop) or (state.max_steps > 0 and step >= state.max_steps)
        if self.measurement.due(step, last=last):
            values = self.measurement.measure(model, step, tokens_seen=_tokens_seen(args, state), final=last)
            if values:
                self._log(state, control, values)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if state.is_world_process_zero and self.measurement.prepared is not None:
            if self.measurement.due(state.global_step, last=True):  # stopped early, after the last step's callbacks
                values = self.measurement.measure(
                    model, state.global_step, tokens_seen=_tokens_seen(args, state), final=True
                )
                if values:
                    state.log_history.append({**values, "step": state.global_step})
            self.measurement.finish(last_step=state.global_step)
        _wait_for_rank_zero()

    def _log(self, state, control, values: dict) -> None:
        """Through ``Trainer.log``: the trainer's own log, its history and every reporting integration."""
        if self.trainer is None:
            state.log_history.append({**values, "step": state.global_step})
            return
        should_log = control.should_log
        self.trainer.log(dict(values))
        # Trainer.log clears should_log, which the step's own log (loss, learning rate) is still to read; under DDP
        # rank 0 alone would then skip that log's all_gather of the loss, and the ranks would wait on each other.
        control.should_log = self.trainer.control.should_log = should_log


def _wait_for_rank_zero() -> None:
    """Under DDP the other ranks wait for rank 0's last measurement and step differences: a rank that exits
    while another still works may take the process group down with it."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


def _calling_trainer(callback):
    """The ``Trainer`` whose callback handler holds ``callback``: callbacks are not given it, and only its
    ``log`` reaches the reporting integrations (they run before user callbacks, so a key added in ``on_log``
    never reaches them)."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        handler = getattr(owner, "callback_handler", None)
        if (
            handler is not None
            and callback in getattr(handler, "callbacks", ())
            and callable(getattr(owner, "log", None))
        ):
            return owner
        frame = frame.f_back
    logger.warning(
        "effdepth: DeffCallback found no Trainer calling it; D_eff goes to the trajectory folder and the trainer "
        "state's log history, not to the report_to trackers"
    )
    return None


def _check_unsharded(args) -> None:
    if getattr(args, "fsdp", None):
        raise EffdepthError(
            "DeffCallback measures the whole model, but FSDP shards its weights across ranks; measure saved "
            "checkpoints with effdepth trajectory instead, or train without FSDP"
        )
    if getattr(args, "deepspeed", None):
        raise EffdepthError(
            "DeffCallback measures the whole model, but DeepSpeed may shard its weights across ranks; measure saved "
            "checkpoints with effdepth trajectory instead"
        )


def _tokens_seen(args, state) -> int | None:
    """The tokens the run has trained on, when the Trainer counts them (``include_num_input_tokens_seen``)."""
    counting = getattr(args, "include_num_input_tokens_seen", "no") not in ("no", False, None)
    return int(getattr(state, "num_input_tokens_seen", 0) or 0) if counting else None
