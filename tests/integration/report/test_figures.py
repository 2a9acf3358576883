"""Figures: every kind, from real and synthetic results, headless, readable files."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import effdepth
from effdepth.report import figures, figures_layers, figures_ratios
from effdepth.report.figures import write_figures
from effdepth.report.figures_common import layer_ticks
from effdepth.report.style import save_figure

STEMS = ["similarity", "profile", "attribution", "views", "layers"]


def assert_real_png(path: Path, min_kb: float = 15):
    assert path.stat().st_size > min_kb * 1024, f"{path.name} is only {path.stat().st_size} bytes"
    with Image.open(path) as im:
        assert im.format == "PNG"
        rgb = np.asarray(im.convert("RGB"))
    assert min(rgb.shape[:2]) > 300, rgb.shape
    packed = (rgb[..., 0].astype(np.int32) << 16) | (rgb[..., 1].astype(np.int32) << 8) | rgb[..., 2]
    colours = len(np.unique(packed))
    assert colours > 50, f"{path.name} has only {colours} colours"
    # Mostly white paper with ink on it, not a blank or a solid block.
    white = (rgb > 245).all(axis=-1).mean()
    assert 0.2 < white < 0.98, f"{path.name}: {white:.0%} white"


def assert_real_pdf(path: Path):
    data = path.read_bytes()
    assert data.startswith(b"%PDF-") and b"%%EOF" in data[-64:] and len(data) > 8 * 1024


@pytest.mark.parametrize("which", ["tiny_result", "synthetic_result"])
def test_write_figures_makes_every_figure(which, request, tmp_path):
    result = request.getfixturevalue(which)
    paths = write_figures(result, tmp_path)
    # passage mode: the lags, tapers and aggregations, the confound controls and the sample size too
    stems = STEMS + ["sensitivity", "confounds", "sample_size"] * result.passages
    assert sorted(p.name for p in paths) == sorted(f"{s}.{ext}" for s in stems for ext in ("png", "pdf"))
    for stem in stems:
        assert_real_png(tmp_path / f"{stem}.png")
        assert_real_pdf(tmp_path / f"{stem}.pdf")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary files left behind"


def test_single_view_without_intervals(bare_result, tmp_path):
    assert bare_result.default.ci is None and len(bare_result.views) == 1
    stems = {p.stem for p in write_figures(bare_result, tmp_path)}
    # no views figure for one view
    assert stems == {"similarity", "profile", "attribution", "layers", "sensitivity", "confounds", "sample_size"}
    for stem in stems:
        assert_real_png(tmp_path / f"{stem}.png")


def test_embedding_included_labels_layers_from_zero(bare_result):
    fig = figures.similarity_figure(bare_result)
    ax = fig.axes[0]
    assert ax.get_xticks()[0] == 0 and ax.get_xlim() == (-0.5, bare_result.default.num_states - 0.5)


def test_thirty_layers_keep_few_ticks(synthetic_result):
    fig = figures.similarity_figure(synthetic_result)
    assert list(fig.axes[0].get_xticks()) == [1, 5, 10, 15, 20, 25, 30]
    assert layer_ticks(1, 80) == [1, 10, 20, 30, 40, 50, 60, 70, 80]


def test_missing_values_are_gaps(gappy_result, tmp_path):
    for stem, fig in figures.standard_figures(gappy_result):
        assert_real_png(save_figure(fig, tmp_path / stem, formats=("png",))[0])
    fig = figures_layers.layers_figure(gappy_result)
    energy = fig.axes[0].lines[0].get_ydata()
    assert np.isnan(energy[0]) and np.isnan(energy[1]) and np.isfinite(energy[2])
    assert np.isnan(fig.axes[2].lines[0].get_ydata()[1])


def test_attribution_waterfall_ends_at_deff(tiny_result):
    v = tiny_result.default
    ax = figures.attribution_figure(tiny_result).axes[0]
    bars = [p for p in ax.patches if p.get_width() > 0]
    assert len(bars) == 5
    first, *steps, last = bars
    assert first.get_height() == pytest.approx(v.reference)
    assert last.get_height() == pytest.approx(v.deff)
    # Each step starts where the last ended; together they go from F_N to D_eff.
    assert sum(p.get_height() for p in steps) == pytest.approx(v.deff - v.reference, abs=1e-9)


def test_views_figure_has_a_row_per_view_and_the_line_at_one(tiny_result):
    ax = figures_ratios.views_figure(tiny_result).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(tiny_result.views)
    assert any(list(line.get_xdata()) == [1.0, 1.0] for line in ax.lines)


def test_unknown_view_is_a_user_error(tiny_result):
    with pytest.raises(effdepth.EffdepthError, match="no view 'nope'.*drop-pos0"):
        figures.profile_figure(tiny_result, view="nope")


def test_unwritable_folder_is_one_line_error(tiny_result, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(effdepth.EffdepthError, match="cannot write figures to"):
        save_figure(figures.profile_figure(tiny_result), blocker / "profile")


def test_figures_are_reproducible(bare_result, tmp_path):
    a = save_figure(figures.profile_figure(bare_result), tmp_path / "a")
    b = save_figure(figures.profile_figure(bare_result), tmp_path / "b")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]  # no timestamps inside


def test_plotting_needs_no_display(saved, tmp_path):
    """A fresh interpreter with neither DISPLAY nor MPLBACKEND, as on a server or in CI."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MPLBACKEND")}
    code = (
        "import sys, effdepth\n"
        "from effdepth.report.figures import write_figures\n"
        "paths = write_figures(effdepth.load(sys.argv[1]), sys.argv[2])\n"
        "print(len(paths), 'matplotlib.pyplot' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(saved["bare"]), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["14", "False"]  # every figure, and pyplot (GUI state) never touched
    assert_real_png(tmp_path / "profile.png")


def first_layer_on_the_axes(result, view: str) -> int:
    """The layer the similarity heatmap's axes start at (its cells are centred on whole layers)."""
    return round(figures.similarity_figure(result, view).axes[0].get_xlim()[0] + 0.5)


def test_a_transformed_view_gets_its_figures_and_layers_start_where_the_states_do(tmp_path):
    import torch

    states = torch.randn(6, 8, 10, 16, dtype=torch.float64).cumsum(0)
    r = effdepth.from_states(states, views="default,top1pc", similarity="cka", bootstrap=20)
    written = {p.stem for p in write_figures(r, tmp_path, view="top1pc")}
    assert {"similarity", "profile", "attribution", "layers", "views"} <= written
    assert first_layer_on_the_axes(r, "top1pc") == first_layer_on_the_axes(r, "default") == 1
    with_s0 = effdepth.from_states(states, views="default,top1pc", similarity="cka", include_embedding=True)
    assert first_layer_on_the_axes(with_s0, "top1pc") == first_layer_on_the_axes(with_s0, "default") == 0
