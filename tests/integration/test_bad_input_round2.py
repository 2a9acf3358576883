"""A second round of bad input, tried from the command line as a new user would: each ends in
one line and a non-zero exit, and the cheap ones before any model loads."""

import json
import shutil
import time

import pytest

from effdepth.cli import main
from effdepth.data import byte_tokenizer
from effdepth.models.tiny import tiny_model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    good = d / "good"
    tiny_model("llama").save_pretrained(good)
    byte_tokenizer().save_pretrained(good)
    weights = next(good.glob("*.safetensors")).name
    for name, damage in {"truncated": lambda b: b[: len(b) // 2], "zeroed": lambda b: b"\0" * 1000}.items():
        shutil.copytree(good, d / name)
        (d / name / weights).write_bytes(damage((good / weights).read_bytes()))
    shutil.copytree(good, d / "badconfig")
    (d / "badconfig" / "config.json").write_text("{not json")
    (d / "fake.gguf").write_bytes(b"GGUF" + b"\0" * 100)
    (d / "bad.jsonl").write_text('{"text": 1}\n{oops\n')
    (d / "binary.txt").write_bytes(bytes(range(256)) * 50)
    (d / "cut").mkdir()
    (d / "cut" / "result.json").write_text('{"schema": "effdepth.result/1", "views": ')
    (d / "wrong").mkdir()
    (d / "wrong" / "result.json").write_text(
        json.dumps({"schema": "effdepth.result/1", "config": {}, "views": {"default": {"deff": "x"}}})
    )
    (d / "newer").mkdir()
    (d / "newer" / "result.json").write_text(json.dumps({"schema": "effdepth.result/2", "config": {}, "views": {}}))
    return d


SMALL = ["--seq-len", "16", "--num-seqs", "4", "--bootstrap", "0", "--no-progress", "--no-figures"]
MODEL_FILES = [
    (["measure", "--pooling", "none", "{d}/truncated", *SMALL], "could not load model"),
    (["measure", "--pooling", "none", "{d}/zeroed", *SMALL], "could not load model"),
    (["measure", "--pooling", "none", "{d}/badconfig", *SMALL], "not a valid JSON"),
    (["measure", "--pooling", "none", "{d}/fake.gguf", *SMALL], "could not load model"),
    (["measure", "--pooling", "none", "{d}/good", "--corpus", "{d}/bad.jsonl", *SMALL], "'text' is a int"),
    (["measure", "--pooling", "none", "{d}/good", "--corpus", "{d}/binary.txt", *SMALL], "binary"),
    (["show", "{d}/cut"], "not a readable result file"),
    (["show", "{d}/wrong"], "damaged effdepth result"),
    (["claims", "{d}/wrong"], "damaged effdepth result"),
    (
        ["show", "{d}/newer"],
        "was written by a newer effdepth (schema 'effdepth.result/2'; this one reads 'effdepth.result/1'): upgrade",
    ),
    (["claims", "{d}/newer"], "written by a newer effdepth"),
    (["recompose", "{d}/cut"], "not a readable result file"),
]
# No model is loaded for these: they must answer in seconds.
CHEAP = [
    (["measure", "--pooling", "none", "{d}/good", "--dtype", "float8"], "unknown dtype"),
    (["measure", "--pooling", "none", "{d}/good", "--max-memory", "lots"], "--max-memory"),
    (["measure", "--pooling", "none", "{d}/good", "--surrogate-seqs", "-1"], "--surrogate-seqs"),
    (["measure", "--pooling", "none", "{d}/good", "--device", "cuda:7"], "CUDA is not available"),
    (["measure", "--pooling", "none", "{d}/good", "--revision", "main"], "applies to Hugging Face hub models"),
    (["measure", "--pooling", "none", "{d}/good", "--corpus", "{d}/missing.txt"], "does not exist"),
    (["measure", "--pooling", "none", "{d}/good", "--bootstrap", "1"], "fewer cannot bound a 95% interval"),
    (["measure", "--pooling", "none", "tiny:llama"], "effdepth sweep tiny:llama --out DIR"),
]


def run(argv, files, capsys):
    code = main([a.format(d=files) for a in argv])
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize("argv, message", MODEL_FILES, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_damaged_files_end_in_one_line(argv, message, files, capsys, tmp_path):
    code, err = run([*argv, *(["--out", str(tmp_path / "o")] if argv[0] == "measure" else [])], files, capsys)
    assert code != 0 and message in err, err
    assert len(err.splitlines()) == 1 and err.startswith("effdepth: error:"), err


@pytest.mark.parametrize("argv, message", CHEAP, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_impossible_options_and_absent_hardware_fail_before_loading(argv, message, files, capsys, tmp_path):
    started = time.monotonic()
    code, err = run([*argv, "--out", str(tmp_path / "o")], files, capsys)
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert time.monotonic() - started < 5
    assert not (tmp_path / "o").exists()


HAND_EDITS = {
    "no views": (lambda d: d.update(views={}), "the result has no views"),
    "a ratio as text": (lambda d: d["views"]["default"].update(ratio="0.8"), "ratio is str, not a number"),
    "no model in the provenance": (lambda d: d["provenance"].update(model=None), "does not say which model"),
    "an empty profile": (lambda d: d["views"]["default"].update(profile=[]), "profile is not a non-empty list"),
    "an attribution of text": (
        lambda d: d["views"]["default"]["attribution"].update(initial_state="big"),
        "attribution is not a table",
    ),
}


@pytest.fixture(scope="module")
def saved_result(tmp_path_factory):
    import torch

    import effdepth

    path = effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0), bootstrap=20).save(tmp_path_factory.mktemp("r"))
    return json.loads(path.read_text())


@pytest.mark.parametrize("edit", HAND_EDITS, ids=list(HAND_EDITS))
@pytest.mark.parametrize("command", ["show", "claims", "report"])
def test_a_hand_edited_result_ends_in_one_line(saved_result, tmp_path, capsys, edit, command):
    change, message = HAND_EDITS[edit]
    data = json.loads(json.dumps(saved_result))
    change(data)
    (tmp_path / "result.json").write_text(json.dumps(data))
    code = main([command, str(tmp_path), *(["-o", str(tmp_path / "r.html")] if command == "report" else [])])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "damaged effdepth result" in err and message in err and len(err.splitlines()) == 1, err


def test_a_result_without_attribution_leaves_that_claim_not_measured(saved_result, tmp_path, capsys):
    data = json.loads(json.dumps(saved_result))
    data["views"]["default"]["attribution"] = {}
    (tmp_path / "result.json").write_text(json.dumps(data))
    assert main(["claims", str(tmp_path)]) == 0
    assert "the result has no attribution" in capsys.readouterr().out
