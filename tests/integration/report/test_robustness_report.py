"""The robustness studies read from saved results: ``effdepth sensitivity`` (maximum lag, taper,
aggregation, with intervals; the model-ordering Spearman across results) and the update diagnostic in
``effdepth show``, the reports and the per-layer figure."""

import re

import numpy as np
import pytest

import effdepth
from effdepth.cli import main
from effdepth.numerics.sensitivity import LABELS, sensitivity_numbers
from effdepth.report import figures, figures_layers, figures_ratios
from effdepth.report.numbers import fmt
from effdepth.results.store import PooledStore


def run(argv, capsys, code=0):
    status = main([str(a) for a in argv])
    out = capsys.readouterr()
    assert status == code, out.err
    return out


def rows_of(text: str, first: str) -> dict:
    """``{label: [cells]}`` of the table whose header starts with ``first``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    out = {}
    for line in lines[start + 2 :]:
        if not line.strip() or not re.search(r"\s{2,}", line):
            break
        cells = re.split(r"\s{2,}", line.strip())
        out[cells[0]] = cells[1:]
    return out


def test_sensitivity_of_a_passage_result_has_every_form_with_its_interval(saved, capsys):
    r = effdepth.load(saved["tiny"])
    v = r.default
    rows = rows_of(run(["sensitivity", saved["tiny"]], capsys).out, "form")
    assert len(rows) == len(LABELS) == 9
    bartlett = rows["Bartlett, full lag (the paper's)"]
    assert bartlett[0] == f"{fmt(v.deff)} [{fmt(v.ci['deff'][0])}, {fmt(v.ci['deff'][1])}]"
    assert bartlett[2] == fmt(v.reference)
    lag1 = next(cells for label, cells in rows.items() if label.startswith("Bartlett, max lag 1"))
    lo, hi = v.ci["sensitivity.bartlett-max-lag-1.deff"]
    assert lag1[0] == f"{fmt(v.sensitivity['bartlett-max-lag-1']['deff'])} [{fmt(lo)}, {fmt(hi)}]"
    assert any("(= full at N = " in label for label in rows)  # max lag 25 with a 2-layer model


def test_sensitivity_of_a_token_result_reads_its_similarity_matrix_without_intervals(saved, capsys):
    out = run(["sensitivity", saved["tiny-token"]], capsys).out
    assert "no intervals: computed from the saved similarity matrix" in out
    v = effdepth.load(saved["tiny-token"]).default
    expected = sensitivity_numbers(np.asarray(v.similarity)[None])
    rows = rows_of(out, "form")
    assert rows["effective rank"][0] == fmt(expected["effective-rank"]["deff"][0])
    assert "[" not in rows["effective rank"][0]


def test_three_results_get_the_spearman_of_their_model_ordering(saved, capsys):
    out = run(["sensitivity", saved["tiny"], saved["synthetic"], saved["bare"]], capsys).out
    ordering = rows_of(out.split("model ordering:")[1], "form")
    assert len(ordering) == len(LABELS) - 1
    for cells in ordering.values():
        assert cells[0] == "n/a" or -1.0 <= float(cells[0]) <= 1.0


def test_sensitivity_of_a_missing_view_is_one_line_that_says_what_the_result_has(saved, capsys):
    err = run(["sensitivity", saved["tiny"], "--view", "top7pc"], capsys, code=2).err
    assert err.count("\n") == 1 and "no view 'top7pc'" in err and "--view" in err


def test_show_has_the_update_diagnostic_and_the_per_layer_norm_ratio(saved, capsys):
    r = effdepth.load(saved["tiny"])
    v = r.default
    out = run(["show", saved["tiny"]], capsys).out
    assert "update diagnostic, similarity cka:" in out
    row = rows_of(out.split("update diagnostic, similarity cka:")[1], "view")["default"]
    lo, hi = v.ci["update_deff"]
    assert row[0] == f"{fmt(v.update_deff)} [{fmt(lo)}, {fmt(hi)}]"
    layers = rows_of(out.split("update norm ratio per layer, view default:")[1], "layer")
    assert list(layers) == [str(l) for l in range(1, len(v.update_norm_ratio) + 1)]
    band = v.ci["update_norm_ratio"]
    assert layers["1"][0] == f"{fmt(v.update_norm_ratio[0])} [{fmt(band[0][0])}, {fmt(band[1][0])}]"
    assert "maximum lag, taper and aggregation, similarity cka:" in out


def test_the_update_norm_ratio_is_the_pooled_norms_ratio_and_is_drawn(saved):
    r = effdepth.load(saved["tiny"])
    v = r.default
    pooled = np.asarray(PooledStore.open(r.pooled).arrays()["default"], dtype=np.float64)  # (L+1, N, d)
    norms = np.linalg.norm(pooled, axis=-1)
    updates = np.linalg.norm(pooled[1:] - pooled[:-1], axis=-1)
    np.testing.assert_allclose(v.update_norm_ratio, updates.mean(1) / norms[:-1].mean(1), rtol=1e-5)
    ax = figures_layers.layers_figure(r).axes[1]
    assert "pooled vectors" in [line.get_label() for line in ax.get_lines()]


def test_a_passage_result_writes_the_sensitivity_figure_with_intervals(saved, tmp_path):
    r = effdepth.load(saved["tiny"])
    assert "sensitivity" in {p.stem for p in figures.write_figures(r, tmp_path)}
    ax = figures_ratios.sensitivity_figure(r).axes[0]
    assert len(ax.get_yticklabels()) == len(LABELS)
    assert any("bootstrap interval" in line.get_label() for line in ax.get_lines())


@pytest.mark.parametrize("suffix", ["html", "md"])
def test_a_report_of_three_passage_results_has_the_model_ordering(saved, tmp_path, suffix):
    from effdepth.report.build import write_report

    folders = []
    for k, scale in enumerate((1.0, 1.1, 1.2)):
        r = effdepth.load(saved["tiny"])
        r.pooled = None  # the report reads result.json only
        r.provenance["model"] = {**r.provenance["model"], "id": f"model-{k}"}
        for sim in r.similarities.values():
            for name, numbers in sim["default"].sensitivity.items():
                numbers["deff"] *= scale if name != "effective-rank" else 1.0 / scale  # one form orders them backwards
        folders.append(r.save(tmp_path / f"m{k}").parent)
    out = write_report(folders, tmp_path / f"r.{suffix}")[0]
    text = out.read_text(encoding="utf-8")
    assert "odel ordering under other lags, tapers and aggregations" in text
    assert "Spearman with Bartlett" in text and "-1.000" in text and "1.000" in text
