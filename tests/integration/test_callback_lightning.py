"""The Lightning DeffCallback with a real Lightning Trainer on a tiny LLaMA: the number ``effdepth measure`` gives
the saved weights, the keys in the TensorBoard event file, a trajectory that ``load``, ``show`` and ``report``
read, the model handed back in training mode, resume appending, and bad input refused at train start."""

import datetime
import shutil
import types
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("tensorboard")

import lightning.pytorch as L  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from lightning.pytorch.loggers import TensorBoardLogger  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

import effdepth  # noqa: E402
from effdepth.cli import main  # noqa: E402
from effdepth.data import byte_tokenizer  # noqa: E402
from effdepth.errors import EffdepthError  # noqa: E402
from effdepth.integrations.lightning import DeffCallback  # noqa: E402
from effdepth.integrations.training import CALLBACK_DEFAULTS  # noqa: E402
from effdepth.models.tiny import tiny_model  # noqa: E402

EVERY, MAX_STEPS, SAVED_STEP = 2, 3, 2
#: Two ranks whose collectives fail after a minute, should they fall out of step, rather than hang the suite.
SPAWNED_DDP = DDPStrategy(start_method="spawn", timeout=datetime.timedelta(seconds=60))


class TinyLM(L.LightningModule):
    """A LightningModule as users write one: a Hugging Face causal LM as ``self.model``."""

    def __init__(self, validation: bool = False):
        super().__init__()
        self.model = tiny_model("llama", seed=0).train()
        self.head = torch.nn.Identity()  # a module of its own, not the LM
        self.validation = validation

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        loss = self.model(input_ids=ids, labels=ids).loss
        self.log("loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        (ids,) = batch
        return self.model(input_ids=ids, labels=ids).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


class NoLM(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 4)

    def training_step(self, batch, batch_idx):
        return self.net(batch[0].float()[:, :4]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Watch(L.Callback):
    """After the DeffCallback: the training mode at every batch end, and the inner model saved at SAVED_STEP."""

    def __init__(self, folder):
        self.folder, self.modes = folder, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.modes.append(all(m.training for m in pl_module.modules()))
        if trainer.global_step == SAVED_STEP and not self.folder.exists():
            pl_module.model.save_pretrained(self.folder)


def _passages(n=8, seed=1):
    return torch.randint(0, 256, (n, 16), generator=torch.Generator().manual_seed(seed))


def _loader(seed=2):
    data = torch.randint(0, 256, (32, 16), generator=torch.Generator().manual_seed(seed))
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_size=4)


def _trainer(root, callbacks, max_steps=MAX_STEPS, **kwargs):
    kwargs.setdefault("logger", TensorBoardLogger(root))
    kwargs.setdefault("devices", 1)
    return L.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=callbacks,
        **kwargs,
    )


def _steps(out):
    return sorted({row["step"] for row in effdepth.load(out).rows})


def _default_cka(out, step):
    rows = effdepth.load(out).rows
    return next(r for r in rows if r["step"] == step and r["similarity"] == "cka" and r["view"] == "default")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Three optimizer steps of two accumulated batches each, measured every 2 steps, checkpointed at step 2."""
    root = tmp_path_factory.mktemp("lightning")
    callback = DeffCallback(_passages(), every_steps=EVERY)
    measured = []
    measure = callback.measurement.measure
    callback.measurement.measure = lambda model, step, **kw: measured.append(step) or measure(model, step, **kw)
    watch = Watch(root / "saved")
    checkpoints = ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=EVERY, save_top_k=-1)
    trainer = _trainer(root, [callback, watch, checkpoints], accumulate_grad_batches=2)
    module = TinyLM()
    trainer.fit(module, _loader())
    return types.SimpleNamespace(root=root, out=root / "effdepth", measured=measured, watch=watch, module=module)


def test_each_due_optimizer_step_is_measured_once(run):
    assert run.measured == [0, 2, 3]  # the start, every 2 steps, the end: once each, not once per batch
    assert _steps(run.out) == [0, 2, 3]


def test_the_callback_number_is_measure_on_the_saved_weights(run):
    measured = effdepth.measure(run.root / "saved", _passages(), **CALLBACK_DEFAULTS, progress=False)
    row = _default_cka(run.out, SAVED_STEP)
    assert row["D_eff"] == measured.default.deff
    assert effdepth.load(run.out / row["key"]).default.deff == measured.default.deff


def test_tensorboard_holds_the_deff_keys_at_the_measured_steps(run):
    (events,) = run.root.glob("lightning_logs/version_0/events.out.tfevents.*")
    scalars = EventAccumulator(str(events)).Reload()
    tags = scalars.Tags()["scalars"]
    assert {"deff/D_eff", "deff/D_eff_over_F_L", "deff/debiased/D_eff_over_F_L", "deff/null_over_F_L"} <= set(tags)
    logged = scalars.Scalars("deff/D_eff")
    assert [e.step for e in logged] == [0, 2, 3]
    assert logged[1].value == pytest.approx(_default_cka(run.out, SAVED_STEP)["D_eff"], rel=1e-6)


def test_the_trajectory_is_shown_and_reported(run, tmp_path, capsys):
    trajectory = effdepth.load(run.out)
    assert {c["step"]: c["final"] for c in trajectory.checkpoints} == {0: False, 2: False, 3: True}
    assert main(["show", str(run.out)]) == 0
    assert main(["report", str(run.out), "-o", str(tmp_path / "report.md")]) == 0
    assert "## Trajectory of TinyLM" in (tmp_path / "report.md").read_text(encoding="utf-8")
    capsys.readouterr()


def test_training_mode_is_handed_back(run):
    assert len(run.watch.modes) == 2 * MAX_STEPS and all(run.watch.modes)
    assert all(m.training for m in run.module.modules())


def test_resume_from_a_checkpoint_appends(run, tmp_path):
    shutil.copytree(run.out, tmp_path / "effdepth")  # the run's folder, as the resumed run finds it
    callback = DeffCallback(_passages(), every_steps=EVERY, figures=False)
    trainer = _trainer(tmp_path, [callback], max_steps=4, accumulate_grad_batches=2)
    trainer.fit(TinyLM(), _loader(), ckpt_path=run.root / "ckpt" / "epoch=0-step=2.ckpt")
    assert _steps(tmp_path / "effdepth") == [0, 2, 4]  # step 3 was the abandoned continuation's
    assert _default_cka(tmp_path / "effdepth", 2)["D_eff"] == _default_cka(run.out, 2)["D_eff"]


def test_eval_passages_and_a_text_corpus(run, tmp_path):
    validation = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(_passages()), batch_size=4)
    callback = DeffCallback("eval", every_steps=EVERY, figures=False)
    trainer = _trainer(tmp_path / "eval", [callback], max_steps=1, logger=False, num_sanity_val_steps=0)
    trainer.fit(TinyLM(), _loader(), validation)
    assert _default_cka(tmp_path / "eval" / "effdepth", 0)["D_eff"] == _default_cka(run.out, 0)["D_eff"]
    texts = ["To be, or not to be, that is the question. " * 3] * 6
    callback = DeffCallback(
        texts, tokenizer=byte_tokenizer(), model_attr="model", num_seqs=6, seq_len=32, figures=False
    )
    _trainer(tmp_path / "text", [callback], max_steps=1, logger=False).fit(TinyLM(), _loader())
    assert _steps(tmp_path / "text" / "effdepth") == [0, 1]


def test_two_ddp_ranks_measure_on_rank_zero(run, tmp_path):
    """Two gloo ranks on CPU: rank 0 measures every passage, rank 1 trains on; neither waits on the other."""
    callback = DeffCallback(_passages(), every_steps=EVERY, figures=False)
    trainer = _trainer(tmp_path, [callback], max_steps=EVERY, devices=2, strategy=SPAWNED_DDP)
    trainer.fit(TinyLM(), _loader())
    assert _steps(tmp_path / "effdepth") == [0, EVERY]
    assert _default_cka(tmp_path / "effdepth", 0)["D_eff"] == _default_cka(run.out, 0)["D_eff"]
    (events,) = tmp_path.glob("lightning_logs/version_0/events.out.tfevents.*")
    assert [e.step for e in EventAccumulator(str(events)).Reload().Scalars("deff/D_eff")] == [0, EVERY]


def _refused(module, callback, tmp_path, *args) -> str:
    trainer = _trainer(tmp_path, [callback], logger=False)
    with pytest.raises(EffdepthError) as caught:
        trainer.fit(module, _loader(), *args)
    assert trainer.global_step == 0 and "\n" not in str(caught.value)
    assert {Path(e.path).name for e in caught.traceback if "/src/effdepth/" in str(e.path)} == {"lightning.py"}
    return str(caught.value)


def test_bad_input_is_one_line_at_train_start(tmp_path):
    assert "holds no model whose decoder blocks" in _refused(NoLM(), DeffCallback(_passages()), tmp_path)
    assert "model_attr='lm' names no module" in _refused(TinyLM(), DeffCallback(_passages(), model_attr="lm"), tmp_path)
    assert "at least 4 passages" in _refused(TinyLM(), DeffCallback(_passages(3)), tmp_path)
    assert "needs a tokenizer" in _refused(TinyLM(), DeffCallback(["some text"] * 8), tmp_path)
    assert "validation data, but it has none" in _refused(TinyLM(), DeffCallback("eval"), tmp_path)
    with pytest.raises(EffdepthError, match="every_steps must be a whole number"):
        DeffCallback(_passages(), every_steps=0)
    sharded = types.SimpleNamespace(strategy=FSDPStrategy(), global_step=0, is_global_zero=True)
    with pytest.raises(EffdepthError, match="the FSDP strategy shards its weights"):
        DeffCallback(_passages()).on_train_start(sharded, TinyLM())
