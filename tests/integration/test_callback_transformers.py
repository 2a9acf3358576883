"""DeffCallback with the real transformers Trainer on a tiny Llama: the callback's D_eff is ``effdepth measure``'s
on the checkpoint saved at that step, the keys reach TensorBoard, the trajectory folder is read by load, show,
report and compare, training is the same with the callback as without it, resuming appends, and every bad input
fails at train start in one line."""

import glob
import logging
import os
import shutil
import traceback
import types

import pytest
import torch
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)

import effdepth
from effdepth.cli import main
from effdepth.data import byte_tokenizer
from effdepth.errors import EffdepthError
from effdepth.integrations.transformers import DeffCallback
from effdepth.models.tiny import tiny_config
from effdepth.scale.trajectory.figures import trajectory_figure

#: The measured passages: 8 windows of 32 bytes of the corpus file (the callback's and ``measure``'s options).
PASSAGES = {"num_seqs": 8, "seq_len": 32}
STEPS, EVERY = 4, 2


class Rows(torch.utils.data.Dataset):
    """Random byte sequences to train on (input_ids and labels), or any rows given."""

    def __init__(self, rows=None, n=32, length=16, seed=0):
        ids = torch.randint(0, 256, (n, length), generator=torch.Generator().manual_seed(seed))
        self.rows = rows if rows is not None else [{"input_ids": r, "labels": r} for r in ids]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


class Probe(TrainerCallback):
    """After the DeffCallback's own hook: the model's modes, trainable parameters and gradient checkpointing."""

    def __init__(self):
        self.seen = []

    def record(self, state, model):
        self.seen.append(
            {
                "step": state.global_step,
                "in_eval": {name for name, m in model.named_modules() if not m.training},
                "trainable": {n for n, p in model.named_parameters() if p.requires_grad},
                "checkpointing": model.is_activation_checkpointing,
            }
        )

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.record(state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.record(state, model)


def tiny_llama(**config):
    """A tiny Llama with attention dropout (so a measurement that moved the RNG would change training), the final
    norm frozen and gradient checkpointing on: what a measurement must hand back as it was."""
    cfg = tiny_config("llama")
    for key, value in {"attention_dropout": 0.2, **config}.items():
        setattr(cfg, key, value)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    model.model.norm.weight.requires_grad_(False)
    model.activation_checkpointing_enable()  # transformers' new name of gradient_checkpointing_enable
    return model


def trainer_for(out, callbacks=(), model=None, eval_dataset=None, tokenizer=True, **arguments):
    args = {
        "max_steps": STEPS,
        "per_device_train_batch_size": 4,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "disable_tqdm": True,
        "seed": 0,
        **arguments,
    }
    return Trainer(
        model=model if model is not None else tiny_llama(),
        args=TrainingArguments(str(out), **args),
        train_dataset=Rows(),
        eval_dataset=eval_dataset,
        data_collator=default_data_collator,
        processing_class=byte_tokenizer() if tokenizer else None,  # saved with every checkpoint
        callbacks=list(callbacks),
    )


def losses(trainer):
    return [e["loss"] for e in trainer.state.log_history if "loss" in e]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "sonnets.txt"
    path.write_text("Shall I compare thee to a summer's day? Thou art more lovely and more temperate. " * 40)
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory, corpus):
    """Four steps measured at 0, 2 and 4, checkpoints at 2 and 4, TensorBoard, tokens counted."""
    out = tmp_path_factory.mktemp("run") / "out"
    probe = Probe()
    callback = DeffCallback(str(corpus), every_steps=EVERY, **PASSAGES)
    model = tiny_llama()
    model.lm_head.eval()  # one module in its own mode: the measurement at train start keeps it so
    trainer = trainer_for(
        out,
        [callback, probe],
        model=model,
        save_strategy="steps",
        save_steps=EVERY,
        report_to=["tensorboard"],
        include_num_input_tokens_seen=True,
    )
    trainer.train()
    rows = [r for r in effdepth.load(out / "effdepth").rows if r["view"] == "default" and r["similarity"] == "cka"]
    return types.SimpleNamespace(
        out=out, trainer=trainer, probe=probe, rows=rows, deff={r["step"]: r["D_eff"] for r in rows}
    )


def test_steps_measured_into_a_trajectory_of_the_run(run):
    assert [r["step"] for r in run.rows] == [0, EVERY, STEPS]
    assert [r["final"] for r in run.rows] == [False, False, True]
    assert [r["tokens_seen"] for r in run.rows] == [step * 4 * 16 for step in (0, EVERY, STEPS)]
    assert {r["weights_source"] for r in run.rows} == {"training"} and all(r["status"] == "ok" for r in run.rows)
    assert run.rows[0]["dD_eff"] is None and all(r["dD_eff"] is not None for r in run.rows[1:])
    assert len(set(run.deff.values())) == 3  # training moved D_eff: the steps are not one number
    result = effdepth.load(run.out / "effdepth" / run.rows[1]["key"])
    assert result.provenance["training"]["output_dir"] == str(run.out)
    assert result.provenance["training"]["step"] == EVERY
    # The values the trainer logged are the trajectory's.
    logged = [e for e in run.trainer.state.log_history if "deff/D_eff" in e]
    assert [(e["step"], e["deff/D_eff"]) for e in logged] == list(run.deff.items())


def test_callback_equals_measure_on_the_saved_checkpoint(run, corpus, tmp_path, capsys):
    checkpoint = run.out / f"checkpoint-{EVERY}"
    result = effdepth.measure(checkpoint, str(corpus), bootstrap=0, progress=False, **PASSAGES)
    assert result.default.deff == run.deff[EVERY]
    argv = ["measure", str(run.out / f"checkpoint-{STEPS}"), "--corpus", str(corpus), "--out", str(tmp_path / "m")]
    argv += ["--num-seqs", "8", "--seq-len", "32", "--bootstrap", "0", "--no-figures", "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    assert effdepth.load(tmp_path / "m").default.deff == run.deff[STEPS]


def test_tensorboard_holds_the_keys_at_the_measured_steps(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # the test extra has it

    (events,) = glob.glob(str(run.out / "runs" / "*" / "events.out.tfevents.*"))
    accumulator = EventAccumulator(os.path.dirname(events))
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    for key in ("D_eff", "D_eff_over_F_L", "null_over_F_L", "debiased/D_eff_over_F_L", "drop-pos0/D_eff_over_F_L"):
        assert f"train/deff/{key}" in tags
    scalars = accumulator.Scalars("train/deff/D_eff")
    assert [e.step for e in scalars] == list(run.deff)
    assert [e.value for e in scalars] == pytest.approx(list(run.deff.values()), rel=1e-6)  # TensorBoard's float32


def test_the_folder_is_shown_reported_and_compared(run, tmp_path, capsys):
    folder = run.out / "effdepth"
    assert main(["show", str(folder)]) == 0
    shown = capsys.readouterr().out
    for step in (0, EVERY, STEPS):
        assert f"step-{step} " in shown
    assert main(["report", str(folder), "-o", str(tmp_path / "report.md")]) == 0
    page = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Trajectory" in page and (tmp_path / "report_files" / "study-1-trajectory.png").is_file()
    assert main(["compare", str(folder), "--out", str(tmp_path / "compare"), "--no-figures", "--no-progress"]) == 0
    capsys.readouterr()
    comparison = effdepth.load(tmp_path / "compare")
    assert [(p.a, p.b) for p in comparison.pairs] == [(0, 1), (1, 2)]  # each step against the one before
    assert (folder / "trajectory.png").is_file()
    figure = trajectory_figure(effdepth.load(folder).rows)
    assert list(figure.axes[0].get_lines()[0].get_xdata()) == [0, 128, 256]  # the last step ends the line


def test_training_is_the_same_with_the_callback_as_without(run, tmp_path):
    plain = trainer_for(tmp_path / "plain")
    plain.train()
    assert losses(plain) == losses(run.trainer) and len(losses(plain)) == STEPS
    trained, measured = plain.model.state_dict(), run.trainer.model.state_dict()
    assert all(torch.equal(trained[name], measured[name]) for name in trained)


def test_the_model_is_handed_back_as_it_was(run):
    assert [s["step"] for s in run.probe.seen] == [0, *range(1, STEPS + 1)]
    after_start, *after_steps = run.probe.seen
    assert after_start["in_eval"] == {"lm_head"} and after_start["checkpointing"]
    for seen in after_steps:  # each training step put the whole model in training mode
        assert seen["in_eval"] == set() and seen["checkpointing"]
        assert seen["trainable"] == after_start["trainable"] and "model.norm.weight" not in seen["trainable"]


def test_a_measurement_leaves_the_random_stream_as_it_was(monkeypatch, tmp_path):
    """Dropout draws from the global stream: whatever a measurement draws comes from a fork of it."""
    import effdepth.measurement.run as run_module
    from effdepth.integrations.training import TrainingMeasurement

    real = run_module.measure_passages
    monkeypatch.setattr(run_module, "measure_passages", lambda *a, **k: (torch.rand(3), real(*a, **k))[1])
    measurement = TrainingMeasurement(torch.randint(0, 256, (4, 8)), every_steps=1, out=tmp_path, figures=False)
    model = tiny_llama()
    measurement.start(model)
    before = torch.get_rng_state()
    assert measurement.measure(model, 0) is not None
    assert torch.equal(torch.get_rng_state(), before)


def test_resume_keeps_the_steps_up_to_the_checkpoint_and_appends(run, corpus, tmp_path):
    out = tmp_path / "resumed"
    shutil.copytree(run.out, out)

    def resume(checkpoint: int, max_steps: int) -> list:
        callback = DeffCallback(str(corpus), every_steps=EVERY, figures=False, **PASSAGES)
        arguments = {"save_strategy": "steps", "save_steps": EVERY, "include_num_input_tokens_seen": True}
        trainer = trainer_for(out, [callback], max_steps=max_steps, **arguments)
        trainer.train(resume_from_checkpoint=str(out / f"checkpoint-{checkpoint}"))
        saved = effdepth.load(out / "effdepth")
        assert len(saved.checkpoints) == len({c["step"] for c in saved.checkpoints})
        return [r for r in saved.rows if r["view"] == "default" and r["similarity"] == "cka"]

    # From step 2 of a run that went to 4: step 4 of the abandoned continuation goes, 4 and 6 are measured anew.
    rows = resume(EVERY, 6)
    assert [r["step"] for r in rows] == [0, 2, 4, 6]
    assert [r["final"] for r in rows] == [False, False, False, True]
    assert [r["D_eff"] for r in rows[:2]] == [run.deff[0], run.deff[EVERY]]  # kept, not measured again
    assert all(r["dD_eff"] is not None for r in rows[1:])
    for row in rows[2:]:
        training = effdepth.load(out / "effdepth" / row["key"]).provenance["training"]
        assert training["output_dir"] == str(out) and training["step"] == row["step"]
    # From its last step: every step stays, the last is no longer final.
    rows = resume(6, 8)
    assert [(r["step"], r["final"]) for r in rows] == [(0, False), (2, False), (4, False), (6, False), (8, True)]
    assert [r["tokens_seen"] for r in rows] == [step * 4 * 16 for step in (0, 2, 4, 6, 8)]


class StopAt(TrainerCallback):
    """Early stopping after ``step`` (as EarlyStoppingCallback does, once the step's callbacks have run)."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step == self.step


@pytest.mark.parametrize("every", [1, 3])
def test_a_run_stopped_early_ends_on_a_final_step(every, corpus, tmp_path):
    callback = DeffCallback(str(corpus), every_steps=every, figures=False, **PASSAGES)
    trainer = trainer_for(tmp_path, [callback, StopAt(1)], max_steps=STEPS)
    trainer.train()
    rows = [r for r in effdepth.load(tmp_path / "effdepth").rows if r["view"] == "default" and r["similarity"] == "cka"]
    assert [(r["step"], r["final"]) for r in rows] == [(0, False), (1, True)]
    assert [e["step"] for e in trainer.state.log_history if "deff/D_eff" in e] == [0, 1]


def test_passages_from_the_eval_dataset(tmp_path):
    ids = torch.randint(0, 256, (6, 24), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[::2, 12:] = 0  # padded rows: measured without their padding, the rest cut to seq_len
    rows = [{"input_ids": i, "attention_mask": m, "labels": i} for i, m in zip(ids, mask, strict=True)]
    model = tiny_llama(attention_dropout=0.0)
    passages = {"input_ids": ids[:, :20], "attention_mask": mask[:, :20]}
    measured = effdepth.measure(model, passages, bootstrap=0, progress=False)
    callback = DeffCallback("eval", every_steps=100, num_seqs=6, seq_len=20, figures=False)
    trainer = trainer_for(tmp_path, [callback], model=model, max_steps=1, eval_dataset=Rows(rows))
    trainer.train()
    rows = effdepth.load(tmp_path / "effdepth").rows
    (row,) = [r for r in rows if r["step"] == 0 and r["view"] == "default" and r["similarity"] == "cka"]
    assert row["D_eff"] == measured.default.deff


# ---------------------------------------------------------------------- failures


class BlocklessConfig(PretrainedConfig):
    model_type = "effdepth-test-blockless"


class Blockless(PreTrainedModel):
    """A causal LM effdepth cannot find decoder blocks in."""

    config_class = BlocklessConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed, self.head = nn.Embedding(259, 8), nn.Linear(8, 259)
        self.post_init()

    def forward(self, input_ids=None, labels=None, **kwargs):
        logits = self.head(self.embed(input_ids))
        return {"loss": nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()), "logits": logits}


def step_folders(folder) -> list:
    return sorted(p.name for p in folder.rglob("step-*") if p.is_dir())


def starts(tmp_path, callback, model=None, **arguments):
    """Train with ``callback``; the one-line error raised before the first step."""
    trainer = trainer_for(tmp_path, [callback], model=model, **arguments)
    with pytest.raises(EffdepthError) as caught:
        trainer.train()
    assert trainer.state.global_step == 0
    return caught


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("blockless", "not in the architecture registry"),
        ("long", "seq_len=32 is beyond LlamaForCausalLM's 16 positions"),
        ("few", "at least 4"),
        ("float16", "float16"),
        ("eval-without-ids", "no input_ids"),
        ("eval-missing", "evaluation dataset, but the trainer has none"),
        ("text-without-tokenizer", "needs a tokenizer"),
    ],
)
def test_bad_input_fails_at_train_start_in_one_line(case, expected, tmp_path, corpus):
    ids = torch.randint(0, 256, (8, 32), generator=torch.Generator().manual_seed(0))
    model, callback, arguments = None, DeffCallback(ids, every_steps=100), {}
    if case == "blockless":
        model = Blockless(BlocklessConfig())
    elif case == "long":
        model = tiny_llama(max_position_embeddings=16)
        callback = DeffCallback(str(corpus), every_steps=100, **PASSAGES)
    elif case == "few":
        callback = DeffCallback(ids[:3], every_steps=100)
    elif case == "float16":
        model = tiny_llama().half()
    elif case == "eval-without-ids":
        callback = DeffCallback("eval", every_steps=100)
        arguments["eval_dataset"] = Rows([{"text": "a"}] * 8)
    elif case == "eval-missing":
        callback = DeffCallback("eval", every_steps=100)
    elif case == "text-without-tokenizer":
        callback, arguments["tokenizer"] = DeffCallback(str(corpus), every_steps=100, **PASSAGES), False
    caught = starts(tmp_path, callback, model=model, **arguments)
    message = str(caught.value)
    assert expected in message and "\n" not in message
    assert not (tmp_path / "effdepth").exists()


@pytest.mark.parametrize("every", [0, -3, 2.5, True])
def test_every_steps_not_positive_is_refused_at_construction(every):
    with pytest.raises(EffdepthError, match="every_steps"):
        DeffCallback(every_steps=every)


def test_a_failed_measurement_is_one_line_and_training_goes_on(tmp_path, corpus, monkeypatch, caplog):
    import effdepth.measurement.run as run_module

    real, calls = run_module.measure_passages, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the pooling\nbroke")
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "measure_passages", flaky)
    callback = DeffCallback(str(corpus), every_steps=1, figures=False, **PASSAGES)
    trainer = trainer_for(tmp_path, [callback], max_steps=2)
    with caplog.at_level(logging.WARNING, logger="effdepth"):
        trainer.train()
    assert trainer.state.global_step == 2
    (line,) = [r.getMessage() for r in caplog.records if r.name == "effdepth"]
    assert line == "effdepth: no D_eff at step 1: the pooling broke; training goes on"
    rows = effdepth.load(tmp_path / "effdepth").rows
    assert sorted({r["step"] for r in rows}) == [0, 2]
    assert step_folders(tmp_path / "effdepth") == ["step-0", "step-2"]


def test_a_failed_write_leaves_no_step_behind(tmp_path, corpus, monkeypatch, caplog):
    import effdepth.scale.trajectory as trajectory_module

    real = trajectory_module.write_trajectory

    def failing(out, rows, summary, **kwargs):
        if any(r["step"] == 1 for r in rows):
            raise OSError("disk full")
        return real(out, rows, summary, **kwargs)

    monkeypatch.setattr(trajectory_module, "write_trajectory", failing)
    callback = DeffCallback(str(corpus), every_steps=1, figures=False, **PASSAGES)
    trainer = trainer_for(tmp_path, [callback], max_steps=1)
    with caplog.at_level(logging.WARNING, logger="effdepth"):
        trainer.train()
    assert trainer.state.global_step == 1
    assert [r.getMessage() for r in caplog.records if r.name == "effdepth"] == [
        "effdepth: no D_eff at step 1: disk full; training goes on"
    ]
    saved = effdepth.load(tmp_path / "effdepth")
    assert {r["step"] for r in saved.rows} == {0}
    assert step_folders(tmp_path / "effdepth") == ["step-0"]


def test_a_script_sees_the_error_in_one_line_not_a_deep_traceback(tmp_path, corpus):
    """A training script that fails at train start: the last line is effdepth's, no chained causes, and the
    traceback stops at the callback (none of effdepth's internals)."""
    ids = torch.randint(0, 256, (3, 16), generator=torch.Generator().manual_seed(0))
    caught = starts(tmp_path, DeffCallback(ids, every_steps=100))
    error = caught.value
    assert error.__cause__ is None and error.__suppress_context__
    frames = traceback.extract_tb(error.__traceback__)
    assert frames[-1].name == "on_train_begin" and frames[-1].filename.endswith("transformers.py")
    assert "effdepth" in frames[-1].filename
    printed = "".join(traceback.format_exception(error))
    assert printed.splitlines()[-1].startswith("effdepth.errors.EffdepthError: 3 row(s) of token ids")


def test_an_existing_trajectory_is_not_overwritten_by_a_new_run(run, corpus):
    trainer = trainer_for(run.out, [DeffCallback(str(corpus), every_steps=EVERY, **PASSAGES)])
    with pytest.raises(EffdepthError, match="already holds a trajectory"):
        trainer.train()
