"""``DeffCallback`` for Lightning: D_eff at the start, every ``every_steps`` optimizer steps and the end of
training, logged to every logger of the trainer at the step measured, and written as a trajectory folder
(``effdepth/`` in the trainer's ``default_root_dir`` unless ``out=`` says, so a resumed run finds it).

    from effdepth.integrations.lightning import DeffCallback
    trainer = Trainer(callbacks=[DeffCallback("shakespeare", tokenizer=tokenizer, every_steps=200)])

The model measured is the Hugging Face causal LM the ``LightningModule`` holds (``self.model = AutoModelFor
CausalLM...``): the module itself when effdepth's architecture registry knows it, else the first of its
submodules it knows, or the one ``model_attr=`` names. Under DDP rank 0 measures that model on every passage
and the other ranks wait at their next collective: each step's number is the one ``effdepth measure`` gives the
checkpoint. Sharded strategies (FSDP, DeepSpeed) are refused at train start: no rank holds the whole model.

Works with ``import lightning.pytorch`` and with the older ``pytorch_lightning`` package.
"""

from __future__ import annotations

try:
    from lightning.pytorch import Callback
except ImportError:
    try:
        from pytorch_lightning import Callback
    except ImportError:
        raise ImportError(
            "effdepth.integrations.lightning needs Lightning, which is not installed: pip install lightning"
        ) from None

import torch

from effdepth.errors import EffdepthError
from effdepth.integrations.training import EVAL, TrainingMeasurement
from effdepth.models.registry import resolve_architecture, supported_model_types

#: Strategies that shard the weights across ranks, by class name (so neither Lightning package is named).
SHARDED_STRATEGIES = {
    "FSDPStrategy": "FSDP",
    "DeepSpeedStrategy": "DeepSpeed",
    "ModelParallelStrategy": "model parallel",
}


class DeffCallback(Callback):
    """Measure D_eff while a Lightning ``Trainer`` trains; arguments as
    :class:`~effdepth.integrations.training.TrainingMeasurement` (``passages="eval"``: the dataset of the
    trainer's validation dataloader), plus ``tokenizer=`` for a text corpus (Lightning has no tokenizer to
    take) and ``model_attr=``, the attribute path of the model to measure in the ``LightningModule``
    (``"model"``; default: found, see the module).

    >>> cb = DeffCallback(every_steps=0)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: every_steps must be a whole number of optimizer steps >= 1, got 0; every_steps=500 measures every 500 steps
    """

    def __init__(self, passages="shakespeare", *, tokenizer=None, model_attr: str | None = None, **options):
        self.measurement = TrainingMeasurement(passages, **options)
        self.tokenizer, self.model_attr = tokenizer, model_attr
        self.model = None  # the causal LM measured, found at train start
        self.step = None  # the optimizer step last seen: batches accumulating gradients do not advance it

    def on_train_start(self, trainer, pl_module):
        try:
            self._start(trainer, pl_module)
        except EffdepthError as exc:
            # Out of trainer.fit() before the first step: the script shows Lightning's frames down to here and
            # the one line, not effdepth's internals or the library errors it was raised from.
            raise EffdepthError(str(exc)) from None
        if trainer.is_global_zero and self.measurement.due(self.step, first=True):
            self._measure(trainer, self.step)

    def _start(self, trainer, pl_module) -> None:
        """Check the strategy and find the model on every rank (each refuses alike); fix the passages on rank 0."""
        check_unsharded(trainer.strategy)
        self.model = measured_model(pl_module, self.model_attr, blocks_path=self.measurement.options.load.blocks_path)
        self.step = step = trainer.global_step
        log_dir = trainer.log_dir  # a broadcast: every rank asks, or the ranks' collectives fall out of step
        if not trainer.is_global_zero:
            return
        passages = self.measurement.passages
        eval_dataset = validation_dataset(trainer) if isinstance(passages, str) and passages == EVAL else None
        self.measurement.start(
            self.model,
            tokenizer=self.tokenizer,
            eval_dataset=eval_dataset,
            step=step,
            resumed=step > 0,
            output_dir=trainer.default_root_dir,
            model_name=getattr(self.model, "name_or_path", None) or type(pl_module).__name__,
            run={"framework": "lightning", "log_dir": log_dir, "ckpt_path": _text(trainer.ckpt_path)},
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self.step or not trainer.is_global_zero or self.measurement.prepared is None:
            return
        self.step = step
        last = is_last_step(trainer)
        if self.measurement.due(step, last=last):
            self._measure(trainer, step, final=last)

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero and self.measurement.prepared is not None:
            if self.measurement.due(trainer.global_step, last=True):  # stopped where no batch end saw it coming
                self._measure(trainer, trainer.global_step, final=True)
            self.measurement.finish(last_step=trainer.global_step)
        # The other ranks wait for rank 0's last measurement and step differences: a rank that exits while
        # another still works may take the group down with it.
        trainer.strategy.barrier("effdepth-train-end")

    def _measure(self, trainer, step: int, final: bool = False) -> None:
        """Measure at ``step`` and hand the values to every logger at that step. ``LightningModule.log`` is
        refused in ``on_train_end``, kept for the epoch's end in ``on_train_start``, and reaches the loggers
        only every ``log_every_n_steps``; a logger's own ``log_metrics`` reaches each at the step whose weights were
        measured, the step Lightning logs the loss of those weights at."""
        values = self.measurement.measure(self.model, step, final=final)
        if values:
            for tracker in trainer.loggers:
                tracker.log_metrics(values, step=step)


def measured_model(pl_module: torch.nn.Module, model_attr: str | None = None, *, blocks_path: str | None = None):
    """The causal LM to measure in ``pl_module``: the one ``model_attr`` names, else ``pl_module`` or the first
    of its submodules (in ``named_modules`` order) whose blocks effdepth finds.

    >>> import torch
    >>> from effdepth.models.tiny import tiny_model
    >>> class Module(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.head = torch.nn.Linear(2, 2)
    ...         self.model = tiny_model("llama")
    >>> type(measured_model(Module())).__name__
    'LlamaForCausalLM'
    """
    owner = type(pl_module).__name__
    if model_attr is not None:
        model = _attribute(pl_module, model_attr)
        if not isinstance(model, torch.nn.Module):
            raise EffdepthError(
                f"model_attr={model_attr!r} names no module of {owner}; name the attribute that holds the causal "
                "LM to measure (e.g. model_attr='model' for self.model)"
            )
        if getattr(model, "config", None) is None:
            raise EffdepthError(
                f"{owner}.{model_attr} is a {type(model).__name__} without a config; D_eff measures a Hugging Face "
                "causal LM: name the attribute that holds one"
            )
        resolve_architecture(model, blocks_path=blocks_path)  # its own one-line error when its blocks are unknown
        return model
    for _, module in pl_module.named_modules():
        if _resolvable(module, blocks_path):
            return module
    raise EffdepthError(
        f"{owner} holds no model whose decoder blocks effdepth can find (a Hugging Face causal LM of a supported "
        f"family: {', '.join(supported_model_types())}); name it with model_attr= (e.g. 'model'), or its blocks "
        "with blocks_path="
    )


def check_unsharded(strategy) -> None:
    """Refuse a strategy that shards the weights: no rank holds the whole model to measure."""
    names = [SHARDED_STRATEGIES[c.__name__] for c in type(strategy).__mro__ if c.__name__ in SHARDED_STRATEGIES]
    if names:
        raise EffdepthError(
            f"DeffCallback measures the whole model, but the {names[0]} strategy shards its weights across ranks; "
            "save checkpoints and measure them with effdepth trajectory instead, or train with ddp"
        )


def validation_dataset(trainer):
    """The dataset of the trainer's (first) validation dataloader, its rows as ``{"input_ids": ...}``."""
    loaders = trainer.val_dataloaders
    if loaders is None and trainer.datamodule is not None:  # validation is off, but the data module has some
        try:
            loaders = trainer.datamodule.val_dataloader()
        except Exception:
            loaders = None
    if isinstance(loaders, dict):
        loaders = next(iter(loaders.values()), None)
    if isinstance(loaders, (list, tuple)):
        loaders = loaders[0] if loaders else None
    dataset = getattr(loaders, "dataset", None)
    if dataset is None:
        raise EffdepthError(
            "passages='eval' measures on the trainer's validation data, but it has none (no val_dataloaders, "
            "validation_step or data module val_dataloader); give fit() val_dataloaders, or give the callback a "
            "corpus ('shakespeare', a file, texts with tokenizer=) or token ids"
        )
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise EffdepthError(
            f"passages='eval' takes the first rows of the validation dataset, but a {type(dataset).__name__} has "
            "no rows to index; give the callback token ids or a corpus instead"
        )
    return RowsWithInputIds(dataset)


class RowsWithInputIds:
    """A dataset whose rows are token id tensors, or tuples whose first item is (a ``TensorDataset``), seen as
    rows of ``{"input_ids": ...}``; rows that are dictionaries are as they are.

    >>> rows = RowsWithInputIds(torch.utils.data.TensorDataset(torch.arange(6).reshape(2, 3)))
    >>> len(rows), rows[1]
    (2, {'input_ids': tensor([3, 4, 5])})
    """

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        row = self.dataset[i]
        ids = row[0] if isinstance(row, (tuple, list)) and row else row
        if isinstance(ids, torch.Tensor) and not ids.is_floating_point() and not ids.is_complex():
            return {"input_ids": ids}
        return row


def is_last_step(trainer) -> bool:
    """Whether the optimizer step just taken is training's last: stopped, at ``max_steps``, or the last batch
    of the last epoch."""
    if trainer.should_stop or (trainer.max_steps is not None and 0 < trainer.max_steps <= trainer.global_step):
        return True
    epochs = trainer.max_epochs
    return epochs is not None and 0 < epochs <= trainer.current_epoch + 1 and bool(trainer.is_last_batch)


def _resolvable(module, blocks_path) -> bool:
    if getattr(module, "config", None) is None:  # a measured model is loaded through its config
        return False
    try:
        resolve_architecture(module, blocks_path=blocks_path)
    except EffdepthError:
        return False
    return True


def _attribute(root, path: str):
    obj = root
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _text(value):
    return None if value is None else str(value)


__all__ = ["DeffCallback", "measured_model", "check_unsharded", "validation_dataset"]
