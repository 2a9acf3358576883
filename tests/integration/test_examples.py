"""The scripts in examples/ run, shortened, as a user runs them."""

import importlib.util
from pathlib import Path

import effdepth

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_with_deff_trains_measures_and_reports(tmp_path):
    example = load_example("train_with_deff")
    out = tmp_path / "run"
    tiny = ["--layers", "2", "--hidden", "32", "--seq-len", "32", "--batch-size", "4", "--eval-seqs", "8"]
    assert example.main(["--steps", "6", "--every-steps", "3", "--out", str(out), *tiny]) == 0
    trajectory = effdepth.load(out / "effdepth")
    assert sorted({row["step"] for row in trajectory.rows}) == [0, 3, 6]
    report = (out / "report.html").read_text()
    assert "trajectory" in report.lower() and "<img" in report
