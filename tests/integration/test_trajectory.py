"""Trajectories over local checkpoints and (faked) hub branches, duplicates flagged."""

import json
import shutil
import types

import huggingface_hub
import pandas as pd
import pytest
import torch
from huggingface_hub.hf_api import BlobLfsInfo, GitRefInfo, GitRefs, RepoSibling

import effdepth
import effdepth.scale.sweep as sweep_module
from effdepth.cli import main
from effdepth.data import byte_tokenizer
from effdepth.errors import EffdepthError
from effdepth.models.tiny import tiny_model
from effdepth.scale.revisions import PYTHIA_TOKENS_PER_STEP
from effdepth.scale.trajectory import trajectory
from effdepth.scale.trajectory.figures import MOVED_LABEL, trajectory_figure

SMALL = ["--seq-len", "16", "--num-seqs", "4", "--bootstrap", "20", "--no-progress"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """step-0, step-100, step-200 (a byte copy of step-100); the tokenizer saved once beside them."""
    root = tmp_path_factory.mktemp("run") / "ckpts"
    byte_tokenizer().save_pretrained(root)
    for step, seed in ((0, 0), (100, 1)):
        tiny_model("llama", seed=seed).save_pretrained(root / f"step-{step}")
    shutil.copytree(root / "step-100", root / "step-200")
    (root / "logs").mkdir()  # no config.json: not a checkpoint
    tiny_model("llama", seed=3).save_pretrained(root / "final")  # a model, but no step in its name
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("corpus") / "text.txt"
    p.write_text("Shall I compare thee to a summer's day? Thou art more lovely and more temperate. " * 50)
    return str(p)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, checkpoints, corpus):
    out = tmp_path_factory.mktemp("trajectory")
    calls = []
    real = sweep_module.measure_job
    mp = pytest.MonkeyPatch()
    mp.setattr(sweep_module, "measure_job", lambda p: calls.append(p["source"]) or real(p))
    try:
        code = main(
            [
                "trajectory",
                "--pooling",
                "none",
                str(checkpoints),
                "--out",
                str(out),
                "--corpus",
                corpus,
                "--tokens-per-step",
                "1000",
                *SMALL,
            ]
        )
    finally:
        mp.undo()
    return out, code, calls


def test_local_checkpoints_measured_in_training_order(local_run, checkpoints):
    out, code, calls = local_run
    assert code == 0
    table = pd.read_csv(out / "trajectory.csv")
    table = table[table.similarity == "cka"].reset_index(drop=True)
    assert table["revision"].tolist() == ["step-0", "step-100", "step-200"]
    assert table["step"].tolist() == [0, 100, 200]
    assert table["tokens_seen"].tolist() == [0, 100_000, 200_000]
    assert (
        table.loc[0, "status"] == "ok" and table.loc[0, "D_eff_lo"] <= table.loc[0, "D_eff"] <= table.loc[0, "D_eff_hi"]
    )
    ok = table[table.status == "ok"].iloc[0]
    assert effdepth.load(out / ok.key).default.deff == pytest.approx(ok.D_eff)
    assert (
        (out / "trajectory.parquet").is_file()
        and (out / "trajectory.png").is_file()
        and (out / "trajectory.pdf").is_file()
    )


def test_duplicated_checkpoint_is_flagged_not_measured(local_run, checkpoints):
    out, _, calls = local_run
    assert sorted(calls) == sorted(str(checkpoints / n) for n in ("step-0", "step-100"))
    table = pd.read_csv(out / "trajectory.csv")
    table = table[table.similarity == "cka"].set_index("revision")
    assert table.loc["step-200", "status"] == "duplicate" and table.loc["step-200", "duplicate_of"] == "step-100"
    assert table.loc["step-200", "weights"] == table.loc["step-100", "weights"] != table.loc["step-0", "weights"]
    assert table.loc["step-200", "weights_source"] == "file sha256"
    assert table.loc["step-200", "D_eff"] == table.loc["step-100", "D_eff"]
    summary = json.loads((out / "trajectory.json").read_text())
    assert summary["duplicates"] == {"step-200": "step-100"} and summary["skipped"] == ["final"]


def test_rerun_measures_nothing(local_run, checkpoints, corpus, monkeypatch):
    out, _, _ = local_run
    monkeypatch.setattr(sweep_module, "measure_job", lambda p: pytest.fail("measured again"))
    t = trajectory(
        checkpoints,
        out,
        corpus=corpus,
        tokens_per_step=1000,
        seq_len=16,
        num_seqs=4,
        bootstrap=20,
        figures=False,
        pooling="none",
    )
    assert t.counts == {"done": 2} and t.duplicates == {"step-200": "step-100"}


def test_a_single_model_folder_is_not_a_trajectory(checkpoints, tmp_path):
    with pytest.raises(EffdepthError, match="single model"):
        trajectory(checkpoints / "step-0", tmp_path, pooling="none")
    with pytest.raises(EffdepthError, match="no checkpoint folder 'step-7'"):
        trajectory(checkpoints, tmp_path, revisions="step-0,step-7", pooling="none")


def test_a_folder_without_config_is_said_to_be_skipped(checkpoints, tmp_path):
    from effdepth.scale.trajectory import discover, select

    notes = select(discover(checkpoints), "auto")[1]
    assert "skipped logs/: no config.json, so not a saved checkpoint" in notes
    with pytest.raises(EffdepthError, match=r"no checkpoint folder 'logs' in .* \(it has no config.json\)"):
        trajectory(checkpoints, tmp_path, revisions="step-0,logs", pooling="none")


# --------------------------------------------------------------------------- the hub, faked

PYTHIA_BRANCHES = [
    "main",
    "step0",
    "step1",
    "step2",
    "step4",
    "step1000",
    "step50000",
    "step58000",
    "step143000",
    "backup-2023",
]


@pytest.fixture
def fake_hub(monkeypatch):
    """Branches from list_repo_refs and LFS sha256s from model_info, as the hub answers them."""
    state = types.SimpleNamespace(
        branches=list(PYTHIA_BRANCHES),
        sha={},
        info_calls=[],
        paths_calls=[],
        measured=[],
        model_info_fails=False,
        paths_info=True,
        refs_error=None,
    )
    state.sha = {b: f"{i:064x}" for i, b in enumerate(state.branches)}
    state.sha["step58000"] = state.sha["step50000"]  # as pythia-12b serves
    state.sha["main"] = state.sha["step143000"]

    def list_repo_refs(repo_id, **kwargs):
        if state.refs_error:
            raise state.refs_error
        return GitRefs(
            branches=[
                GitRefInfo(name=b, ref=f"refs/heads/{b}", target_commit=f"{i:040x}")
                for i, b in enumerate(state.branches)
            ],
            converts=[],
            tags=[],
        )

    class FakeApi:
        def model_info(self, repo_id, revision=None, files_metadata=False, **kwargs):
            state.info_calls.append(revision)
            if state.model_info_fails:
                raise OSError("metadata unavailable")
            lfs = BlobLfsInfo(size=10, sha256=state.sha[revision], pointer_size=130)
            return types.SimpleNamespace(
                siblings=[
                    RepoSibling("config.json", size=1, blob_id="c"),
                    RepoSibling("model.safetensors", size=10, blob_id="b", lfs=lfs),
                ]
            )

        def get_paths_info(self, repo_id, paths, revision=None, **kwargs):
            state.paths_calls.append(revision)
            if not state.paths_info:
                raise OSError("no")
            return [
                types.SimpleNamespace(
                    path="model.safetensors", lfs={"size": 10, "sha256": state.sha[revision], "pointer_size": 1}
                )
            ]

    def measure_job(payload):
        state.measured.append(payload["revision"])
        g = torch.Generator().manual_seed(len(state.measured))
        return effdepth.from_states(torch.randn(7, 8, 8, 16, generator=g, dtype=torch.float64).cumsum(0), bootstrap=20)

    monkeypatch.setattr(huggingface_hub, "list_repo_refs", list_repo_refs)
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(sweep_module, "measure_job", measure_job)
    return state


def test_hub_auto_flags_identical_branches(fake_hub, tmp_path):
    t = trajectory("EleutherAI/pythia-12b", tmp_path, bootstrap=20, pooling="none")
    assert t.skipped == ["backup-2023"] and any("backup-2023" in n for n in t.notes)
    assert t.duplicates == {"step58000": "step50000", "main": "step143000"}
    assert "step58000" not in fake_hub.measured and "main" not in fake_hub.measured
    assert fake_hub.measured == ["step0", "step1", "step2", "step4", "step1000", "step50000", "step143000"]
    rows = {r["revision"]: r for r in t.rows}
    assert rows["step1000"]["tokens_seen"] == 1000 * PYTHIA_TOKENS_PER_STEP
    assert rows["step58000"]["status"] == "duplicate" and rows["step58000"]["weights_source"] == "hub LFS sha256"
    assert rows["main"]["final"] and rows["main"]["duplicate_of"] == "step143000"
    assert (tmp_path / "trajectory.png").is_file()
    table = pd.read_parquet(tmp_path / "trajectory.parquet")
    assert table["revision"].tolist()[-1] == "main" and (table["status"] == "duplicate").sum() == 2 * 2  # cka, debiased


def test_hub_every_k_and_lists(fake_hub, tmp_path):
    t = trajectory("EleutherAI/pythia-12b", tmp_path, revisions="every:3", bootstrap=20, figures=False, pooling="none")
    assert [c.revision for c in t.checkpoints] == ["step0", "step4", "step58000", "step143000", "main"]
    assert t.duplicates == {"main": "step143000"}  # step50000 was not selected: step58000 is measured
    assert sorted(fake_hub.info_calls) == sorted(c.revision for c in t.checkpoints)
    t = trajectory(
        "EleutherAI/pythia-12b",
        tmp_path,
        revisions="step1000,nonsense,step2",
        bootstrap=20,
        figures=False,
        pooling="none",
    )
    assert [c.revision for c in t.checkpoints] == ["step2", "step1000"]
    assert any("nonsense" in n for n in t.notes)


def test_hub_metadata_fallbacks(fake_hub, tmp_path):
    fake_hub.model_info_fails = True
    t = trajectory(
        "EleutherAI/pythia-12b", tmp_path, revisions="step50000,step58000", bootstrap=20, figures=False, pooling="none"
    )
    assert fake_hub.paths_calls == ["step50000", "step58000"] and t.duplicates == {"step58000": "step50000"}
    # No metadata at all: the branch commit is the fingerprint (distinct commits here: nothing flagged).
    fake_hub.paths_info = False
    t = trajectory(
        "EleutherAI/pythia-12b", tmp_path, revisions="step50000,step58000", bootstrap=20, figures=False, pooling="none"
    )
    assert t.duplicates == {} and t.rows[0]["weights_source"] == "branch commit"


def test_olmo2_branches_on_the_token_axis(fake_hub, tmp_path):
    fake_hub.branches = [
        "main",
        "stage1-step0-tokens0B",
        "stage1-step1000-tokens5B",
        "stage1-step2000-tokens9B",
        "stage2-ingredient1-step500-tokens3B",
        "stage2-ingredient2-step500-tokens3B",
    ]
    fake_hub.sha = {b: f"{i:064x}" for i, b in enumerate(fake_hub.branches)}
    t = trajectory("allenai/OLMo-2-0425-1B", tmp_path, bootstrap=20, pooling="none")
    rows = {r["revision"]: r for r in t.rows}
    assert rows["stage2-ingredient2-step500-tokens3B"]["tokens_seen"] == 12_000_000_000
    assert rows["stage2-ingredient1-step500-tokens3B"]["track"] == "stage2-ingredient1"
    assert t.duplicates == {} and len(fake_hub.measured) == 6


PYTHIA_ALL = ["main", "step0"] + [f"step{2**i}" for i in range(10)] + [f"step{k * 1000}" for k in range(1, 144)]


def test_a_preset_measures_its_log_spaced_checkpoints_and_records_itself(fake_hub, tmp_path, capsys, monkeypatch):
    states = torch.randn(4, 8, 8, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64).cumsum(0)
    monkeypatch.setattr(
        sweep_module,
        "measure_job",  # 25 checkpoints: a result without resamples each
        lambda p: fake_hub.measured.append(p["revision"]) or effdepth.from_states(states, bootstrap=0),
    )
    fake_hub.branches = list(PYTHIA_ALL)
    fake_hub.sha = {b: f"{i:064x}" for i, b in enumerate(PYTHIA_ALL)}
    fake_hub.sha["main"] = fake_hub.sha["step143000"]
    out = tmp_path / "paper-pythia"
    assert (
        main(
            [
                "trajectory",
                "paper-pythia",
                "--pooling",
                "none",
                "--out",
                str(out),
                "--bootstrap",
                "20",
                "--no-progress",
                "--no-figures",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    summary = json.loads((out / "trajectory.json").read_text())
    revisions = [c["revision"] for c in summary["checkpoints"]]
    # Pythia-1.4B's 35 planned log-spaced checkpoints are 25 distinct branches (the paper: "25 of 35"), plus main.
    assert len(revisions) == 26 and revisions[0] == "step0" and revisions[-2:] == ["step143000", "main"]
    assert {"step1", "step512", "step1000"} <= set(revisions) and "step142000" not in revisions
    assert summary["model"] == "EleutherAI/pythia-1.4b" and summary["revisions"] == "log:35"
    assert summary["preset"]["name"] == "paper-pythia" and "Figure 3" in summary["preset"]["source"]
    assert any("25 of 35 planned" in n for n in summary["notes"])
    assert fake_hub.measured == revisions[:-1]  # main repeats step143000's weights: flagged, not measured
    assert "preset paper-pythia: EleutherAI/pythia-1.4b, log:35" in printed
    assert effdepth.load(out).preset["name"] == "paper-pythia"
    assert main(["show", str(out)]) == 0 and "preset paper-pythia" in capsys.readouterr().out


def test_the_olmo2_preset_spaces_stage1_only(fake_hub):
    from effdepth.scale.suites.trajectories import trajectory_preset
    from effdepth.scale.trajectory import discover, select

    steps = [0, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 400000, 596057]
    stage1 = [f"stage1-step{s}-tokens{round(s * 8.39 / 1000)}B" for s in steps]
    fake_hub.branches = stage1 + [f"stage2-ingredient{k}-step11931-tokens100B" for k in (1, 2, 3)] + ["main"]
    preset = trajectory_preset("paper-olmo2")
    assert preset.model == "allenai/OLMo-2-1124-13B" and "5T" in preset.source
    chosen, notes = select(discover(preset.model, revisions=preset.revisions), preset.revisions)
    assert [c.revision for c in chosen] == stage1 + ["main"]  # fewer branches than 35: all of stage 1, none of stage 2
    assert any("stage2-ingredient1, stage2-ingredient2, stage2-ingredient3 are not selected" in n for n in notes)
    fake_hub.branches = [f"stage1-step{s * 1000}-tokens{s * 8}B" for s in range(0, 600)] + ["main"]
    chosen, _ = select(discover(preset.model, revisions=preset.revisions), preset.revisions)
    assert len(chosen) <= 36 and chosen[0].revision == "stage1-step0-tokens0B"
    assert chosen[-2].revision == "stage1-step599000-tokens4792B" and chosen[-1].final


def test_hub_errors_are_one_line(fake_hub, tmp_path, capsys):
    fake_hub.refs_error = OSError("Repository Not Found\nfor url ...")
    assert main(["trajectory", "--pooling", "none", "EleutherAI/pythia-12b", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot list the branches of EleutherAI/pythia-12b" in err and "\n" not in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["trajectory", "--pooling", "none", "EleutherAI/pythia-70m", "--revisions", "every:0", "--out", "{out}"],
            "every:K needs a whole number",
        ),
        (
            ["trajectory", "--pooling", "none", "EleutherAI/pythia-70m", "--revisions", "../step1", "--out", "{out}"],
            "malformed revision",
        ),
        (
            ["trajectory", "--pooling", "none", "EleutherAI/pythia-70m", "--revision", "step1", "--out", "{out}"],
            "not --revision",
        ),
        (["trajectory", "--pooling", "none", "../x", "--out", "{out}"], "malformed model id"),
        (["trajectory", "--pooling", "none", "tiny:llama", "--out", "{out}"], "no training checkpoints"),
        (
            ["trajectory", "--pooling", "none", "EleutherAI/pythia-70m", "--out", "{out}", "--executor", "spark"],
            "invalid choice",
        ),
        (
            [
                "trajectory",
                "--pooling",
                "none",
                "EleutherAI/pythia-70m",
                "--revisions",
                "step1,step1",
                "--out",
                "{out}",
            ],
            "step1 more than once",
        ),
        (
            ["trajectory", "--pooling", "none", "EleutherAI/pythia-70m", "--tokens-per-step", "-5", "--out", "{out}"],
            "--tokens-per-step must be",
        ),
        (
            ["trajectory", "EleutherAI/pythia-70m", "--revisions", "log:0", "--out", "{out}"],
            "log:K needs a whole number K >= 2",
        ),
        (
            ["trajectory", "paper-pythia", "--revisions", "every:2", "--out", "{out}"],
            "preset paper-pythia fixes its checkpoints",
        ),
        (
            ["trajectory", "paper-olmo", "--out", "{out}"],
            "'paper-olmo' is not a trajectory preset (paper-olmo2, paper-pythia)",
        ),
    ],
)
def test_cli_bad_input_exits_2(fake_hub, tmp_path, capsys, argv, message):
    fake_hub.refs_error = AssertionError("the hub must not be asked")
    code = main([a.replace("{out}", str(tmp_path / "o")) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err
    assert not (tmp_path / "o").exists()  # no empty output folder left behind


def _row(rev, step, d, status="ok", final=False):
    return {
        "key": rev,
        "revision": rev,
        "step": step,
        "tokens_seen": None if step is None else step * 100,
        "track": "main",
        "final": final,
        "status": status,
        "D_eff": d,
        "D_eff_lo": d - 0.1,
        "D_eff_hi": d + 0.1,
        "F_L": 1.9,
        "R_init": 1.5,
        "R_init_lo": 1.4,
        "R_init_hi": 1.6,
        "R_size": 1.8,
        "R_matched": 1.4,
    }


def test_figure_axis_places_step0_and_main():
    fig = trajectory_figure(
        [
            _row("step0", 0, 1.0),
            _row("step10", 10, 1.2),
            _row("step20", 20, 1.2, "duplicate"),
            _row("main", None, 1.3, final=True),
        ]
    )
    ax = fig.axes[0]
    # Evenly spaced steps (a training run's every_steps): a linear axis from 0.
    assert ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0] == "0" and labels[-1] == "main"
    assert any("duplicate" in t.get_text() for t in fig.legends[0].get_texts())
    # Log-spaced checkpoints (Pythia's): step 0 on a short linear stretch, the rest on a log axis.
    fig = trajectory_figure([_row(f"step{s}", s, 1.0) for s in (0, 1, 10, 100, 1000)])
    assert fig.axes[0].get_xscale() == "symlog" and fig.axes[0].get_xlim()[0] == 0
    fig = trajectory_figure([_row("step10", 10, 1.0), _row("step1000", 1000, 1.2)])
    assert fig.axes[0].get_xscale() == "log"


def moved_rings(fig) -> list:
    """``(x, D_eff)`` of the checkpoints the figure rings as moved against the one before."""
    rings = [line for line in fig.axes[0].get_lines() if line.get_label() == MOVED_LABEL]
    return [xy for line in rings for xy in zip(line.get_xdata(), line.get_ydata())]


def test_the_figure_rings_exactly_the_checkpoints_that_moved():
    rows = [
        {**_row("step0", 0, 1.0), "moved": None},  # the first: nothing before it
        {**_row("step10", 10, 1.2), "moved": True},
        {**_row("step20", 20, 1.21), "moved": False},
        {**_row("step20", 20, 1.4), "view": "top1pc", "moved": True},  # another view's: not the one drawn
        {**_row("step30", 30, 1.21, "duplicate"), "moved": True},
        {**_row("step40", 40, 1.5), "moved": True},
    ]
    fig = trajectory_figure(rows)
    assert moved_rings(fig) == [(1000.0, 1.2), (4000.0, 1.5)]
    assert MOVED_LABEL in [t.get_text() for t in fig.legends[0].get_texts()]
    calm = trajectory_figure([{**r, "moved": False} for r in rows])
    assert moved_rings(calm) == [] and MOVED_LABEL not in [t.get_text() for t in calm.legends[0].get_texts()]
    older = trajectory_figure([_row("step0", 0, 1.0), _row("step10", 10, 1.2)])  # rows without the column
    assert moved_rings(older) == [] and len(older.axes[0].get_lines()) >= 2


def test_show_refuses_a_trajectory_table_cut_short(local_run, tmp_path, capsys):
    out, code, _ = local_run
    assert code == 0
    shutil.copy(out / "trajectory.json", tmp_path / "trajectory.json")
    header = (out / "trajectory.csv").read_text().splitlines()[0]
    (tmp_path / "trajectory.csv").write_text(header + "\n")
    assert main(["show", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "trajectory.csv has 0 rows for the" in err and "damaged" in err and "\n" not in err


def test_a_passage_mode_trajectory_has_the_update_diagnostic_per_checkpoint(checkpoints, corpus, tmp_path, capsys):
    out = tmp_path / "passages"
    assert (
        main(
            [
                "trajectory",
                str(checkpoints),
                "--out",
                str(out),
                "--corpus",
                corpus,
                "--tokens-per-step",
                "1000",
                "--seq-len",
                "16",
                "--num-seqs",
                "16",
                "--bootstrap",
                "20",
                "--no-progress",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "trajectory.csv")
    ok = table[(table.status == "ok") & (table.similarity == "cka") & (table.view == "default")]
    assert len(ok) >= 2  # a checkpoint with the weights of an earlier one is a duplicate, not measured again
    for row in ok.itertuples():
        assert row.updates_D_eff_lo <= row.updates_D_eff <= row.updates_D_eff_hi
        assert effdepth.load(out / row.key).default.update_deff == pytest.approx(row.updates_D_eff)
    # The update diagnostic is shown: the command's table and effdepth show (D_eff/L of the updates with its interval)...
    first = ok.iloc[0]
    per_layer = f"{first.updates_D_eff / first.L:.3f} [{first.updates_D_eff_lo / first.L:.3f}, {first.updates_D_eff_hi / first.L:.3f}]"
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    for text in (printed, shown):
        header = next(line for line in text.splitlines() if line.startswith("checkpoint"))
        assert "updates D_eff/L" in header and "D_eff/L" in header
        assert per_layer in next(line for line in text.splitlines() if line.startswith(f"{first.revision} "))
    # ...the figure's second panel (D_eff/L of the updates beside the states', with bands)...
    fig = trajectory_figure(effdepth.load(out).rows)
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "D_eff / L"
    labels = [line.get_label() for line in fig.axes[1].get_lines()]
    assert any("update diagnostic" in label for label in labels) and len(fig.axes[1].collections) >= 2
    # ...and effdepth report of the trajectory: its table (the same numbers) and its figure.
    from effdepth.report.build import write_report

    page = write_report([out / "trajectory.json"], tmp_path / "report.md")[0].read_text(encoding="utf-8")
    assert page.startswith(f"# Trajectory of {checkpoints}") and "updates D\\_eff/L" not in page
    assert "| updates D_eff/L |" in page and per_layer in page
    assert (tmp_path / "report_files" / "study-1-trajectory.png").is_file()
