""".gguf files: parsed once on the first load, then loaded from their dequantised copy in the cache.

Every test writes a tiny Llama GGUF (Q8_0 matrices, the byte vocabulary) and
uses a cache of its own, so nothing touches the user's cache.
"""

import json
import os
from pathlib import Path

import pytest
import torch

import effdepth
from effdepth.cli import main
from effdepth.errors import EffdepthError
from effdepth.measurement import prepare
from effdepth.models import gguf as gguf_cache
from effdepth.models.hooks import ResidualCapture
from effdepth.models.tiny import tiny_gguf
from effdepth.options import LoadOptions

TEXT = ["Tomorrow, and tomorrow, and tomorrow, creeps in this petty pace from day to day. " * 20]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "effdepth-cache"
    monkeypatch.setenv("EFFDEPTH_CACHE", str(folder))
    return folder


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    return tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def load(path, **options):
    return prepare(LoadOptions(model=str(path), corpus=TEXT, seq_len=16, num_seqs=4, **options), progress=False)


def states(prepared):
    with torch.no_grad(), ResidualCapture(prepared.arch) as cap:
        prepared.lm.model(input_ids=prepared.tokens.input_ids)
    return cap.states


def copy_of(cache: Path) -> Path:
    (folder,) = [p for p in (cache / "gguf").iterdir() if p.name != "hashes"]
    return folder


def test_second_load_takes_the_cached_copy_and_gives_the_same_states_bit_for_bit(gguf_file, cache, capsys, monkeypatch):
    first = load(gguf_file)
    err = capsys.readouterr().err
    assert err.count("converting tiny.gguf") == 1 and len(err.strip().splitlines()) == 1, err
    assert first.lm.info["weights"]["made"] == "this run"

    monkeypatch.setattr(gguf_cache, "convert", lambda *a, **k: pytest.fail("converted again"))
    second = load(gguf_file)
    assert capsys.readouterr().err == ""
    assert second.lm.info["weights"]["made"] == "an earlier run"
    assert torch.equal(first.tokens.input_ids, second.tokens.input_ids)
    assert torch.equal(states(first), states(second))


def test_the_copy_holds_exactly_what_transformers_reads_from_the_gguf(gguf_file, cache):
    from transformers import AutoModelForCausalLM

    ours = load(gguf_file)
    direct = AutoModelForCausalLM.from_pretrained(
        str(gguf_file.parent), gguf_file=gguf_file.name, dtype=torch.float32
    ).eval()
    with torch.no_grad():
        want = direct(input_ids=ours.tokens.input_ids, output_hidden_states=True).hidden_states
        got = ours.lm.model(input_ids=ours.tokens.input_ids, output_hidden_states=True).hidden_states
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))


def test_the_first_load_parses_the_file_once(gguf_file, cache, monkeypatch):
    import gguf

    built = []

    class Counting(gguf.GGUFReader):
        def __init__(self, path, *args, **kwargs):
            built.append(path)
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    prepared = load(gguf_file)
    assert prepared.lm.info["weights"]["made"] == "this run"
    assert len(built) == 1  # config, tokenizer and weights all came from one parse


def test_the_result_names_the_gguf_file_and_its_sha256(gguf_file, cache):
    import hashlib

    r = effdepth.measure(str(gguf_file), TEXT, seq_len=16, num_seqs=4, bootstrap=0, progress=False, pooling="none")
    model = r.provenance["model"]
    sha = hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    assert model["source"] == "gguf" and model["path"] == str(gguf_file.resolve()) and model["sha256"] == sha
    weights = model["weights"]
    assert weights["gguf"] == str(gguf_file.resolve()) and weights["gguf_sha256"] == sha
    assert Path(weights["copy"]) == cache / "gguf" / sha[:16]
    assert weights["converted_with"]["transformers"] and weights["dtype"] == "float32"


def _truncate(folder):
    p = folder / "model.safetensors"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _flip_bytes(folder):
    p = folder / "model.safetensors"
    data = bytearray(p.read_bytes())
    data[-100:] = bytes(100)  # same size, other weights
    p.write_bytes(bytes(data))


def _garbage_keeping_size_and_mtime(folder):
    p = folder / "model.safetensors"
    stat = p.stat()
    p.write_bytes(b"\xff" * stat.st_size)  # passes the cheap checks, fails to load
    os.utime(p, ns=(stat.st_atime_ns, stat.st_mtime_ns))


DAMAGES = {
    "truncated weights": (_truncate, "is damaged (model.safetensors is"),
    "changed weights": (_flip_bytes, "is damaged (model.safetensors was changed"),
    "no manifest": (lambda f: (f / gguf_cache.MANIFEST).unlink(), "is damaged (no effdepth-gguf.json)"),
    "no tokenizer": (lambda f: (f / "tokenizer.json").unlink(), "is damaged (tokenizer.json is missing)"),
    "garbage that slips past the checks": (_garbage_keeping_size_and_mtime, "does not load"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_copy_is_detected_and_rebuilt(gguf_file, cache, capsys, damage):
    harm, message = DAMAGES[damage]
    reference = states(load(gguf_file))
    harm(copy_of(cache))
    capsys.readouterr()
    again = load(gguf_file)
    err = capsys.readouterr().err.strip().splitlines()
    said = [line for line in err if "dequantised copy of tiny.gguf" in line]
    assert len(said) == 1 and message in said[0] and said[0].endswith("rebuilding it from the GGUF file"), err
    assert again.lm.info["weights"]["made"] == "this run"
    assert torch.equal(states(again), reference)
    assert gguf_cache._check_copy(copy_of(cache), again.lm.info["sha256"]) is None
    assert not [p.name for p in (cache / "gguf").iterdir() if p.name.startswith(".")]  # no staging or trash left


@pytest.mark.parametrize(
    "damage, message",
    [
        ("half", "could not load model bad.gguf: the GGUF file cannot be read"),
        ("header only", "could not load model bad.gguf: the GGUF file cannot be read"),
        ("not gguf", "bad.gguf is not a GGUF file"),
    ],
)
def test_a_corrupt_or_truncated_gguf_gives_a_one_line_error(gguf_file, cache, tmp_path, capsys, damage, message):
    data = gguf_file.read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(
        {"half": data[: len(data) // 2], "header only": data[:2000], "not gguf": b"<html>404</html>"}[damage]
    )
    code = main(
        [
            "measure",
            "--pooling",
            "none",
            str(bad),
            "--corpus",
            str(gguf_file),
            "--seq-len",
            "8",
            "--num-seqs",
            "4",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("effdepth: error: ") and message in err[0], err
    assert not (tmp_path / "out").exists()
    with pytest.raises(EffdepthError, match=message):
        effdepth.measure(str(bad), TEXT, seq_len=16, num_seqs=4, bootstrap=0, progress=False, pooling="none")
    assert not [p for p in (cache / "gguf").glob("*") if p.name != "hashes"]  # nothing half-written


def test_no_progress_hides_the_conversion_bar(gguf_file, cache, tmp_path, capsys):
    argv = [
        "measure",
        "--pooling",
        "none",
        str(gguf_file),
        "--corpus",
        str(gguf_file.parent / "text.txt"),
        "--seq-len",
        "8",
        "--num-seqs",
        "4",
        "--bootstrap",
        "0",
        "--no-figures",
    ]
    (gguf_file.parent / "text.txt").write_text(TEXT[0])
    assert main([*argv, "--out", str(tmp_path / "quiet"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "de-quantizing" not in err and "Loading weights" not in err and "%|" not in err, err
    assert err.count("\n") == 1 and "converting tiny.gguf" in err

    gguf_cache.discard_copy(copy_of(cache))
    assert main([*argv, "--out", str(tmp_path / "loud")]) == 0
    assert "de-quantizing" in capsys.readouterr().err  # the bar that --no-progress hid


def test_a_run_that_finds_the_copy_already_made_uses_it(gguf_file, cache):
    sha = gguf_cache.file_sha256(gguf_file)
    made = gguf_cache.convert(gguf_file, sha, progress=False).folder
    manifest = (made / gguf_cache.MANIFEST).read_text()
    # A second run converting at the same time loses the rename and takes the first one's copy.
    assert gguf_cache.convert(gguf_file, sha, progress=False).folder == made
    assert (made / gguf_cache.MANIFEST).read_text() == manifest
    assert [p.name for p in (cache / "gguf").iterdir() if p.name != "hashes"] == [made.name]  # no staging left


def test_without_room_for_a_copy_the_run_still_loads_the_file(gguf_file, cache, capsys, monkeypatch):
    import shutil
    from collections import namedtuple

    reference = states(load(gguf_file))
    gguf_cache.discard_copy(copy_of(cache))
    full = namedtuple("usage", "total used free")(10**12, 10**12, 0)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: full)
    capsys.readouterr()
    again = load(gguf_file)
    err = capsys.readouterr().err
    assert "cannot keep a dequantised copy of tiny.gguf" in err and "GiB free" in err
    assert "no copy" in again.lm.info["weights"]["from"]
    assert torch.equal(states(again), reference)
    assert not [p for p in (cache / "gguf").iterdir() if p.name != "hashes"]


def test_the_hash_is_memoised_per_path_size_and_mtime(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(gguf_cache, "_MEMO_MIN_BYTES", 0)  # as for a real, large file
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(100))
    first = gguf_cache.file_sha256(f)
    real = gguf_cache._sha256
    monkeypatch.setattr(gguf_cache, "_sha256", lambda p: pytest.fail("hashed again"))
    assert gguf_cache.file_sha256(f) == first
    f.write_bytes(b"GGUF" + bytes(101))  # another size (and mtime): hashed again
    monkeypatch.setattr(gguf_cache, "_sha256", real)
    assert gguf_cache.file_sha256(f) != first


def test_a_gguf_tokenizer_can_be_named_on_its_own(gguf_file, cache):
    from effdepth.models.loading import load_tokenizer

    tok = load_tokenizer(str(gguf_file))
    assert tok("hé", add_special_tokens=False)["input_ids"] == [104, 195, 169]
    assert json.loads(json.dumps(tok.bos_token)) == "<bos>"


def test_a_named_gguf_tokenizer_comes_from_the_copy_once_there_is_one(gguf_file, cache, monkeypatch):
    from effdepth.models.loading import load_tokenizer

    load(gguf_file)  # makes the copy
    monkeypatch.setattr(gguf_cache, "parse_once", lambda **k: pytest.fail("parsed the GGUF file again"))
    tok = load_tokenizer(str(gguf_file))
    assert tok("hé", add_special_tokens=False)["input_ids"] == [104, 195, 169]


def test_a_copy_with_new_mtimes_but_the_same_bytes_is_kept_and_hashed_once(gguf_file, cache, capsys, monkeypatch):
    load(gguf_file)
    weights = copy_of(cache) / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # as after cp -r
    capsys.readouterr()
    assert load(gguf_file).lm.info["weights"]["made"] == "an earlier run"
    assert capsys.readouterr().err == ""
    sha = gguf_cache.file_sha256(gguf_file)
    monkeypatch.setattr(gguf_cache, "_sha256", lambda p: pytest.fail("hashed again"))
    assert gguf_cache._check_copy(copy_of(cache), sha) is None
