"""Bad input, systematically: every malformed argument or file ends in a result
or a one-line error with a non-zero exit, never a traceback."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from effdepth.cli import main


@pytest.fixture(scope="module")
def model_dir(saved_tiny_model):
    return saved_tiny_model("gpt2")


@pytest.fixture(scope="module")
def good_corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("c") / "good.txt"
    p.write_text("Out, out, brief candle! Life's but a walking shadow. " * 200)
    return p


def check_outcome(code, err):
    assert code in (0, 2, 130), f"exit {code}: {err}"
    assert "Traceback" not in err
    if code != 0:
        lines = [l for l in err.splitlines() if l.strip() and not l.startswith(("\r", "Loading", "Writing"))]
        assert len(lines) == 1 and lines[0].startswith("effdepth"), err


NUMBERS = st.one_of(
    st.integers(-10, 40).map(str),
    st.sampled_from(["0", "-1", "1e9", "99999999999999999999", "", "nan", "3.5", "abc", "١٢"]),
)
FLAG_VALUES = {
    "--seq-len": NUMBERS,
    "--num-seqs": NUMBERS,
    "--batch-size": NUMBERS,
    "--bootstrap": st.one_of(st.integers(-5, 50).map(str), st.sampled_from(["1000000000", "x"])),
    "--seed": NUMBERS,
    "--similarity": st.sampled_from(["frobenius", "token", "cos", ""]),
    "--views": st.sampled_from(
        ["default", "paper", "top0pc", "drop-pos0+pos0-only", "center", "", ",", "top3pc-shared"]
    ),
    "--dtype": st.sampled_from(["float32", "float16", "int8", ""]),
    "--device": st.sampled_from(["cpu", "cuda", "tpu", ""]),
    "--pooling": st.sampled_from(["mean", "none", "max"]),
    "--tokens-per-passage": NUMBERS,
    "--corpus": st.sampled_from(["GOOD", "/nonexistent", "", "hf:", "hf:a:b:c:d", "shakespeare!"]),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flags=st.dictionaries(st.sampled_from(sorted(FLAG_VALUES)), st.just(None), max_size=4), data=st.data())
def test_cli_arguments(flags, data, model_dir, good_corpus, tmp_path, capsys):
    argv = [
        "measure",
        str(model_dir),
        "--out",
        str(tmp_path / "o"),
        "--no-progress",
        "--no-figures",
        "--corpus",
        str(good_corpus),
        "--seq-len",
        "8",
        "--num-seqs",
        "3",
        "--bootstrap",
        "10",
    ]
    for flag in flags:
        value = data.draw(FLAG_VALUES[flag], label=flag)
        argv += [flag, str(good_corpus) if value == "GOOD" else value]
    code = main(argv)
    check_outcome(code, capsys.readouterr().err)


FILE_CONTENTS = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300),
    st.just(b""),
    st.just(b"\xff\xfe\x00bad utf8 \xc3\x28"),
    st.just("x" * 200_000),  # one huge line
    st.lists(
        st.one_of(
            st.just('{"text": "fine words"}'),
            st.just("{not json"),
            st.just('{"txt": 1}'),
            st.just('{"text": 5}'),
            st.just("[]"),
            st.just(""),
        ),
        max_size=6,
    ).map("\n".join),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=FILE_CONTENTS, suffix=st.sampled_from([".txt", ".jsonl", ".md", ".bin", ""]))
def test_corpus_files(content, suffix, model_dir, tmp_path_factory, capsys):
    d = tmp_path_factory.mktemp("f")
    path = d / f"corpus{suffix}"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    code = main(
        [
            "measure",
            str(model_dir),
            "--corpus",
            str(path),
            "--seq-len",
            "4",
            "--num-seqs",
            "2",
            "--bootstrap",
            "0",
            "--out",
            str(d / "o"),
            "--no-progress",
            "--no-figures",
        ]
    )
    check_outcome(code, capsys.readouterr().err)


def test_empty_folder_and_folder_of_junk(model_dir, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.bin").write_bytes(b"\x00\x01")
    (junk / ".hidden.txt").write_text("hidden")
    for folder in (empty, junk):
        code = main(["measure", str(model_dir), "--corpus", str(folder), "--out", str(tmp_path / "o"), "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2
        check_outcome(code, err)


def test_result_files_are_json_and_bad_ones_are_refused(tmp_path, capsys):
    bad = tmp_path / "result.json"
    for content in (b"\x80\x03pickle", b"{}", b"[1, 2]", json.dumps({"schema": "other"}).encode()):
        bad.write_bytes(content)
        code = main(["show", str(bad)])
        check_outcome(code, capsys.readouterr().err)
        assert code == 2
