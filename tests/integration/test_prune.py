"""The pruning boundary check: blocks skipped exactly, the block-influence order against ShortGPT's formula,
the held-out perplexity against the model's own loss, held-out passages apart from the measured ones, and
the command's files and one-line errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from effdepth.cli import main
from effdepth.data.tokenizers import byte_tokenizer
from effdepth.measurement import prepare
from effdepth.models.registry import resolve_architecture
from effdepth.models.tiny import tiny_model
from effdepth.options import Options, RunOptions
from effdepth.studies.prune import BlockSkip, heldout_loss, heldout_passages, parse_skip, prune_check

SMALL = {"num_seqs": 16, "seq_len": 32, "bootstrap": 0}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prune") / "tiny-llama"
    tiny_model("llama").save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def checked(model_dir):
    return prune_check(Options.build(model=str(model_dir), **SMALL), [1, 2], heldout=8, run=RunOptions(progress=False))


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox"])
def test_a_skipped_block_outputs_its_input_and_no_skip_is_the_plain_model(family):
    model = tiny_model(family).eval()
    arch = resolve_architecture(model)
    ids = torch.randint(0, 256, (2, 9))
    seen = {}

    def record(module, args, kwargs, output):
        seen["in"] = (args[0] if args else kwargs["hidden_states"]).clone()
        seen["out"] = (output[0] if isinstance(output, tuple) else output).clone()

    with torch.no_grad():
        plain = model(ids).logits
        with BlockSkip(arch, []):
            assert torch.equal(model(ids).logits, plain)
        handle = arch.blocks[1].register_forward_hook(record, with_kwargs=True)  # after the skip's prepended hook
        try:
            with BlockSkip(arch, [2]):
                skipped = model(ids).logits
        finally:
            handle.remove()
        assert torch.equal(seen["out"], seen["in"]) and not torch.equal(skipped, plain)
        assert torch.equal(model(ids).logits, plain)  # the hooks are gone


def shortgpt_block_influence(prepared) -> np.ndarray:
    """Men et al. (2024): 1 - mean over every real token of cos(block input, block output), per block."""
    blocks, store = prepared.arch.blocks, {}
    handles = [
        b.register_forward_hook(
            lambda m, a, k, o, i=i: store.__setitem__(
                i, (a[0] if a else k["hidden_states"], o[0] if isinstance(o, tuple) else o)
            ),
            with_kwargs=True,
        )
        for i, b in enumerate(blocks)
    ]
    passages, total, count = prepared.tokens, np.zeros(len(blocks)), 0
    try:
        with torch.no_grad():
            for i in range(passages.num_passages):
                ids = torch.from_numpy(passages.passage(i))[None]
                prepared.lm.model(input_ids=ids)
                for l in range(len(blocks)):
                    x, y = store[l]
                    total[l] += torch.nn.functional.cosine_similarity(x[0].double(), y[0].double(), dim=-1).sum().item()
                count += ids.shape[1]
    finally:
        for h in handles:
            h.remove()
    return 1.0 - total / count


def test_the_block_influence_order_is_shortgpts(model_dir, checked):
    prepared = prepare(Options.build(model=str(model_dir), **SMALL).load, progress=False)
    expected = shortgpt_block_influence(prepared)
    np.testing.assert_allclose(checked.scores["block_influence"], expected, rtol=1e-4, atol=1e-7)
    assert checked.orders["block_influence"] == [int(i) + 1 for i in np.argsort(expected, kind="stable")]
    assert sorted(checked.orders["local_deff"]) == [1, 2, 3] and -1.0 <= checked.spearman <= 1.0


def test_heldout_passages_are_not_measured_and_the_unpruned_perplexity_is_the_models_loss(model_dir, checked):
    prepared = prepare(Options.build(model=str(model_dir), **SMALL).load, progress=False)
    held = heldout_passages(prepared, 8)
    measured = {tuple(prepared.tokens.passage(i).tolist()) for i in range(prepared.tokens.num_passages)}
    assert held.num_passages == 8 and not measured & {tuple(held.passage(i).tolist()) for i in range(8)}
    total = tokens = 0
    with torch.no_grad():
        for i in range(held.num_passages):
            ids = torch.from_numpy(held.passage(i))[None]
            out = prepared.lm.model(input_ids=ids, labels=ids)  # transformers' own shifted mean loss
            total += out.loss.item() * (ids.shape[1] - 1)
            tokens += ids.shape[1] - 1
    assert checked.baseline["perplexity"] == pytest.approx(math.exp(total / tokens), rel=1e-6)
    assert heldout_loss(prepared, held, [], batch_size=3)["mean"] == pytest.approx(total / tokens, rel=1e-6)  # padded
    assert len(checked.perplexity["block_influence"]) == 2 and all(p > 0 for p in checked.perplexity["local_deff"])


def test_the_command_writes_the_study_and_its_measured_result(model_dir, tmp_path, capsys):
    out = tmp_path / "prune"
    code = main(
        [
            "prune-check",
            str(model_dir),
            "--num-seqs",
            "16",
            "--seq-len",
            "32",
            "--bootstrap",
            "0",
            "--skip",
            "2",
            "--heldout",
            "8",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    record = json.loads((out / "prune.json").read_text())
    assert record["skips"] == [1, 2] and set(record["orders"]) == {"block_influence", "local_deff"}
    assert (out / "prune.png").is_file() and (out / "measured" / "result.json").is_file()
    assert "Spearman correlation of the two rankings" in captured.out
    assert main(["show", str(out)]) == 0  # effdepth show reads the study back: the same table
    shown = capsys.readouterr().out
    assert shown.startswith("pruning boundary check of ") and captured.out.split("\n\nwrote")[0] in shown
    from effdepth.report.build import write_report

    for suffix in ("html", "md"):
        page = write_report([out], tmp_path / f"report.{suffix}")[0].read_text(encoding="utf-8")
        assert "runing boundary check of" in page and "block influence skips" in page
        assert f"{record['baseline']['perplexity']:.3f}" in page
    assert (tmp_path / "report_files" / "study-1-prune.png").is_file()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--skip", "x"], "--skip 'x' is not K or A..B"),
        (["--skip", "3"], "skip at most 2"),
        (["--heldout", "0"], "at least 1 held-out passage"),
    ],
)
def test_bad_input_is_one_line(model_dir, tmp_path, capsys, argv, message):
    code = main(
        [
            "prune-check",
            str(model_dir),
            "--num-seqs",
            "16",
            "--seq-len",
            "32",
            "--bootstrap",
            "0",
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
            *argv,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "x").exists()


def test_parse_skip():
    assert parse_skip("1..4") == [1, 2, 3, 4] and parse_skip("2") == [1, 2]
    with pytest.raises(Exception, match="1 <= A <= B"):
        parse_skip("3..1")
