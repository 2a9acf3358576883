"""effdepth compare on the two embedded real models, which have different tokenizers: SmolLM2-135M measured
on Shakespeare paragraphs through the CLI, then Gemma-3-270m measured by ``compare`` on the same passages;
the verdict, comparison.json, the cross-model CKA, Python's numbers and the report in a real browser.
"""

import contextlib
import io
import json
import re

import numpy as np
import pytest
from browser import browse, image_status, js_errors, probed
from PIL import Image

import effdepth
from effdepth.cli import main
from effdepth.data import assets
from effdepth.results.store import PooledStore
from effdepth.studies.compare.report import verdict

pytestmark = pytest.mark.slow

# Few short passages: this checks the path end to end, not the number (README has the full-size run).
MEASURE = ("--passage-split", "paragraphs", "--seq-len", "48", "--num-seqs", "16", "--bootstrap", "50")


def cli(*argv) -> str:
    """What ``effdepth ARGV`` printed; it must succeed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main([*map(str, argv)])
    assert code == 0, printed.getvalue()[-2000:]
    return printed.getvalue()


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """``(root, printed)``: SmolLM2 measured into root/smollm2, and compared with Gemma into root/compare."""
    root = tmp_path_factory.mktemp("real-compare")
    cli("measure", "smollm2-135m", *MEASURE, "--out", root / "smollm2", "--no-figures", "--no-progress")
    printed = cli("compare", root / "smollm2", "gemma-3-270m", "--out", root / "compare", "--no-progress")
    return root, printed


@pytest.fixture(scope="module")
def comparison(compared):
    return effdepth.load(compared[0] / "compare")


def test_the_verdict_line_is_printed_as_saved(compared, comparison):
    _, printed = compared
    pair = comparison.pairs[0]
    line = verdict(comparison, pair, "default", "cka")
    assert f"gemma-3-270m against smollm2  {line}" in printed
    d = pair.difference("ratio")
    if d["resolved"]:
        assert re.match(rf"gemma-3-270m is (higher|lower) than smollm2 by {abs(d['estimate']):.3f} F_L \[", line)
    else:
        assert line.startswith("no difference resolved at this N between gemma-3-270m and smollm2")
    assert f"D_eff/F_L {d['b']:.3f} against {d['a']:.3f}; cka, default view" in line


def test_comparison_json_records_both_real_models_on_the_same_passages(compared, comparison):
    root, _ = compared
    saved = json.loads((root / "compare" / "comparison.json").read_text())
    assert saved["schema"] == "effdepth.comparison/1"
    assert [(m["label"], m["model"], m["num_layers"], m["passages"]) for m in saved["members"]] == [
        ("smollm2", assets.SMOLLM2_ID, 30, 16),
        ("gemma-3-270m", assets.GEMMA3_ID, 18, 16),
    ]
    assert saved["config"]["bootstrap"] == 50 and saved["config"]["similarities"] == ["cka", "cka-debiased"]
    smol, gemma = (effdepth.load(root / p) for p in ("smollm2", "compare/gemma-3-270m"))
    assert gemma.config["passage_split"] == "paragraphs" and gemma.config["seq_len"] == 48
    a, b = smol.provenance["corpus"], gemma.provenance["corpus"]
    assert a["text_sha256"] == b["text_sha256"] and a["sha256"] != b["sha256"]  # same texts, other tokens
    d = comparison.pairs[0].difference("ratio", similarity="cka-debiased")
    assert d["a"] == pytest.approx(smol.similarities["cka-debiased"]["default"].ratio, abs=1e-12)
    assert d["b"] == pytest.approx(gemma.similarities["cka-debiased"]["default"].ratio, abs=1e-12)
    assert d["interval"][0] <= d["estimate"] <= d["interval"][1]


def test_the_cross_model_cka_is_every_smollm2_state_against_every_gemma_state(compared, comparison):
    """(L_A + 1) x (L_B + 1), equal to a naive numpy biased CKA of the saved pooled vectors."""
    root, _ = compared
    cross = comparison.pairs[0].cross
    for similarity in ("cka", "cka-debiased"):
        assert np.array(cross[similarity]).shape == (31, 19)
    a, b = (pooled(effdepth.load(root / p)) for p in ("smollm2", "compare/gemma-3-270m"))
    assert a.shape[:2] == (31, 16) and b.shape[:2] == (19, 16)
    np.testing.assert_allclose(cross["cka"], naive_cross_cka(a, b), rtol=1e-6, atol=1e-9)


def pooled(result) -> np.ndarray:
    return np.asarray(PooledStore.open(result.pooled).arrays()["default"], dtype=np.float64)


def naive_cross_cka(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Biased linear CKA of every (passages x d) matrix of ``a`` with every one of ``b``, centred over passages."""
    ca, cb = ([x - x.mean(0) for x in stack] for stack in (a, b))
    self_a = np.array([np.linalg.norm(x.T @ x) for x in ca])
    self_b = np.array([np.linalg.norm(y.T @ y) for y in cb])
    hsic = np.array([[np.linalg.norm(x.T @ y) ** 2 for y in cb] for x in ca])
    return hsic / np.outer(self_a, self_b)


def test_python_gives_the_clis_differences_exactly(compared, comparison):
    root, _ = compared
    again = effdepth.compare(root / "smollm2", root / "compare" / "gemma-3-270m", progress=False)
    assert again.pairs[0].differences == comparison.pairs[0].differences
    assert again.pairs[0].cross["cka"] == comparison.pairs[0].cross["cka"]


@pytest.mark.acceptance  # a real browser
def test_the_report_of_the_comparison_renders_in_a_real_browser(compared, comparison, tmp_path):
    root, _ = compared
    cli("report", root / "compare", "-o", tmp_path / "compare.html")
    page = probed(tmp_path / "compare.html", tmp_path / "probed.html")
    dom = browse(page.as_uri(), tmp_path, "--virtual-time-budget=5000", "--dump-dom").stdout
    assert js_errors(dom) == ""
    loaded, total = image_status(dom)
    assert loaded == total > 0, f"{loaded} of {total} images decoded"
    text = dom.replace("<wbr>", "")
    assert "<h1>Paired comparison of smollm2, gemma-3-270m</h1>" in text
    assert verdict(comparison, comparison.pairs[0], "default", "cka") in text
    figure = re.search(r'<figure id="fig-study-1"[^>]*><img alt="Paired comparison[^"]*" src="data:image/png;base64,'
                       r'([^"]+)"><figcaption>(.*?)</figcaption>', text)  # fmt: skip
    assert figure and "the linear CKA of every state of A (rows) with every state of B" in figure.group(2)
    assert heatmap_colours(figure.group(1)) > 100, "the heatmap half of the comparison figure is (nearly) blank"


def heatmap_colours(png_base64: str) -> int:
    """Distinct colours in the left half of a comparison figure, where its cross-model heatmap is drawn."""
    import base64

    with Image.open(io.BytesIO(base64.b64decode(png_base64))) as im:
        rgb = np.asarray(im.convert("RGB"))
    left = rgb[:, : rgb.shape[1] // 2].reshape(-1, 3).astype(np.int64)
    return len(np.unique((left[:, 0] << 16) | (left[:, 1] << 8) | left[:, 2]))
