"""The HTML report: self-contained, escaped, sorted, and it renders in a real browser."""

import base64
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from browser import browse, image_status, js_errors, probed
from PIL import Image

import effdepth
from effdepth.report.build import write_report
from effdepth.report.html import SCRIPT


class Page(HTMLParser):
    """The parts of a page the tests look at: images, links, scripts, the comparison rows."""

    def __init__(self, text):
        super().__init__()
        self.images, self.urls, self.scripts, self.sections = [], [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src", ""))
        for key in ("src", "href"):
            if key in a and tag != "img":
                self.urls.append(a[key])
        if tag in ("link", "iframe", "object", "embed"):
            self.urls.append(a.get("href") or a.get("src") or tag)
        if tag == "script":
            self.scripts.append(a)
        if tag == "section" and a.get("id", "").startswith("result-"):
            self.sections.append(a["id"])


@pytest.fixture(scope="module")
def one_report(saved, tmp_path_factory):
    return write_report([saved["tiny"]], tmp_path_factory.mktemp("html") / "one.html")[0]


@pytest.fixture(scope="module")
def many_report(saved, tmp_path_factory):
    root = saved["tiny"].parent  # tiny, synthetic and bare, found recursively
    return write_report([root], tmp_path_factory.mktemp("html") / "many.html")[0]


def test_one_result_has_every_part(one_report, tiny_result):
    text = one_report.read_text(encoding="utf-8")
    for heading in ("Summary", "Views", "References", "Figures (view default)", "Provenance"):
        assert f"<h3>{heading}</h3>" in text
    for view in tiny_result.views:
        assert f"<td>{view}</td>" in text
    v = tiny_result.default
    assert f"{v.deff:.3f}" in text and f"[{v.ci['deff'][0]:.3f}, {v.ci['deff'][1]:.3f}]" in text
    p = tiny_result.provenance
    for value in (
        p["corpus"]["sha256"],
        p["code"]["git_commit"] or "git_commit",
        p["libraries"]["torch"],
        p["created"],
        str(p["elapsed_s"]),
        p["model"]["dtype"],
        p["model"]["device"],
    ):
        assert value in text, value
    assert (
        "figures" in text and len(Page(text).images) == 8
    )  # five standard figures, sensitivity, confounds, sample size


def test_every_provenance_and_config_entry_is_shown(one_report, tiny_result):
    text = one_report.read_text(encoding="utf-8")

    def leaves(d, prefix=""):
        for k, x in d.items():
            if isinstance(x, dict) and x:
                yield from leaves(x, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}"

    keys = [
        k.split(".", 1)[1] if isinstance(tiny_result.provenance.get(k.split(".")[0]), dict) else k
        for k in leaves(tiny_result.provenance)
    ] + list(leaves(tiny_result.config))
    missing = [k for k in keys if f'<th scope="row">{k}</th>' not in text]
    assert not missing, missing


def test_self_contained(many_report):
    text = many_report.read_text(encoding="utf-8")
    page = Page(text)
    assert page.images and all(src.startswith("data:image/png;base64,") for src in page.images)
    for src in page.images:
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(u.startswith("#") for u in page.urls), [u for u in page.urls if not u.startswith("#")]
    assert all("src" not in s for s in page.scripts)  # inline only, no CDN
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert not re.search(r"https?://", text.split("<body>", 1)[1].replace("data:", ""))


def test_comparison_sorted_by_ratio(many_report, tiny_result, synthetic_result, bare_result):
    text = many_report.read_text(encoding="utf-8")
    assert Page(text).sections == ["result-1", "result-2", "result-3"]
    comparison = text.split('<section id="comparison">', 1)[1].split("</table>", 1)[0]
    assert '<table class="sortable sticky">' in comparison
    header = re.findall(r"<th[^>]*>(.*?)</th>", comparison)
    col = header.index("D<sub>eff</sub> / F<sub>L</sub>")
    rows = comparison.split("<tbody>", 1)[1].split("</tr>")[:-1]
    shown = [float(re.search(r'data-sort="([^"]+)"', re.findall(r"<td[^>]*>", row)[col]).group(1)) for row in rows]
    assert shown == pytest.approx(sorted(r.default.ratio for r in (tiny_result, synthetic_result, bare_result)))
    assert [re.search(r'href="#(result-\d)"', row).group(1) for row in rows] == ["result-1", "result-2", "result-3"]


def test_text_is_escaped(bare_result, tmp_path):
    r = effdepth.Result.from_dict(bare_result.to_dict())
    r.provenance["model"] = {"id": '<script>alert("x")</script>&co', "revision": "<b>v1</b>"}
    r.config["note"] = "a < b & c"
    out = write_report([r.save(tmp_path / "evil")], tmp_path / "evil.html")[0]
    text = out.read_text(encoding="utf-8")
    assert "<script>alert" not in text and "<b>v1</b>" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;co" in text and "a &lt; b &amp; c" in text


@pytest.mark.acceptance  # a real browser
def test_report_renders_in_a_real_browser(many_report, tmp_path):
    shot = tmp_path / "report.png"
    out = browse(many_report.as_uri(), tmp_path, f"--screenshot={shot}", "--window-size=1280,2000")
    assert shot.exists(), out.stderr[-2000:]
    with Image.open(shot) as im:
        rgb = np.asarray(im.convert("RGB"))
    assert rgb.shape[:2] == (2000, 1280)
    packed = (rgb[..., 0].astype(np.int32) << 16) | (rgb[..., 1].astype(np.int32) << 8) | rgb[..., 2]
    assert len(np.unique(packed)) > 500, "the screenshot is (nearly) blank"

    dom = browse(many_report.as_uri(), tmp_path, "--virtual-time-budget=5000", "--dump-dom").stdout
    loaded, total = image_status(dom)
    assert loaded == total > 0, f"{loaded} of {total} images decoded"


@pytest.mark.acceptance  # a real browser
def test_browser_check_detects_a_broken_image(tmp_path):
    """The check above would catch an image that does not decode."""
    page = tmp_path / "broken.html"
    png = _one_pixel_png()
    page.write_text(
        f'<!DOCTYPE html><html><body><img src="data:image/png;base64,{png}"><img src="data:image/png;base64,AAAA">'
        f'<div id="img-status" data-loaded="" data-total=""></div><script>{SCRIPT}</script></body></html>'
    )
    loaded, total = image_status(browse(page.as_uri(), tmp_path, "--virtual-time-budget=5000", "--dump-dom").stdout)
    assert (loaded, total) == (1, 2)


@pytest.mark.acceptance  # a real browser
def test_browser_check_detects_a_script_error(tmp_path):
    """The error probe the browser checks put on a page records an uncaught error."""
    page = tmp_path / "throws.html"
    page.write_text("<!DOCTYPE html><html><head></head><body><script>throw new Error('boom')</script></body></html>")
    dom = browse(probed(page, tmp_path / "probed.html").as_uri(), tmp_path, "--virtual-time-budget=5000", "--dump-dom")
    assert "boom" in js_errors(dom.stdout)


def _one_pixel_png() -> str:
    import io

    buf = io.BytesIO()
    Image.new("RGB", (1, 1), (200, 0, 0)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_missing_values_show_as_not_available(gappy_result, tmp_path):
    out = write_report([gappy_result.save(tmp_path / "g")], tmp_path / "g.html")[0]
    text = out.read_text(encoding="utf-8")
    assert "<td>top1pc</td>" in text and "n/a" in text
    assert "loss.perplexity" in text and "Extra measurements" in text


MARKUP_MODEL = "<script>alert(1)</script>"
MARKUP_CORPUS = "<b>bold</b><script>document.documentElement.setAttribute('data-pwned', '1')</script>"


@pytest.mark.acceptance  # a real browser
def test_markup_in_model_and_corpus_names_renders_as_text_in_a_real_browser(bare_result, tmp_path):
    r = effdepth.Result.from_dict(bare_result.to_dict())
    r.provenance["model"] = {"id": MARKUP_MODEL, "revision": "<b>v1</b>"}
    r.provenance["corpus"] = {"name": MARKUP_CORPUS, "sha256": "0" * 64}
    out = write_report([r.save(tmp_path / "evil")], tmp_path / "evil.html")[0]
    text = out.read_text(encoding="utf-8")
    assert MARKUP_MODEL not in text and "<b>bold</b>" not in text and "<b>v1</b>" not in text

    dom = browse(out.as_uri(), tmp_path, "--virtual-time-budget=5000", "--dump-dom").stdout
    loaded, total = image_status(dom)  # the page's own script ran...
    assert loaded == total > 0
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt;" in dom and "&lt;b&gt;bold&lt;/b&gt;" in dom
    )  # ...the names are text...
    assert (
        "<b>bold</b>" not in dom and "<b>v1</b>" not in dom and 'data-pwned="1"' not in dom
    )  # ...never markup or code


# Measures the page once it has loaded: its width against the window's, and whether the comparison's first
# columns stay put while its box scrolls.
LAYOUT_PROBE = """<script>window.addEventListener('load', function () {
  var box = document.querySelector('#comparison .scroll'), cell = box.querySelector('tbody tr').cells[1];
  var before = cell.getBoundingClientRect().left;
  box.scrollLeft = box.scrollWidth;
  var d = document.documentElement, after = cell.getBoundingClientRect().left;
  d.setAttribute('data-layout', [d.scrollWidth, window.innerWidth, box.clientWidth, box.scrollWidth,
    box.scrollLeft, before, after].join(' '));
});</script></body>"""


@pytest.mark.acceptance  # a real browser
def test_a_wide_comparison_scrolls_in_its_box_with_the_model_in_view(option_runs, tmp_path):
    report = write_report(list(option_runs.values()), tmp_path / "options.html")[0]
    text = report.read_text(encoding="utf-8")
    header = re.findall(r"<th[^>]*>(.*?)</th>", text.split('<section id="comparison">', 1)[1].split("</thead>")[0])
    assert len([h for h in header if h.startswith("--")]) >= 6
    page = tmp_path / "probed.html"
    page.write_text(text.replace("</body>", LAYOUT_PROBE), encoding="utf-8")
    dom = browse(page.as_uri(), tmp_path, "--window-size=1280,2000", "--virtual-time-budget=5000", "--dump-dom").stdout
    found = re.search(r'data-layout="([^"]+)"', dom)
    assert found, "the probe did not run"
    page_width, window, box, table, scrolled, before, after = map(float, found.group(1).split())
    assert window == 1280 and page_width <= window, (page_width, window)
    assert table > box and scrolled > 0  # the premise: the table is wider than its box, which scrolled
    assert after == pytest.approx(before, abs=1)  # the model column stayed in view
