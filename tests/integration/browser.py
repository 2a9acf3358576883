"""A report opened in headless Chromium, for the tests that need a real browser.

Imported by name from the test files (``from browser import browse``): the test folders are no packages.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]

# Records every uncaught script error of the page on <html data-js-errors>, so a dumped DOM says whether
# any script failed; it goes first in <head> to see errors of every script after it.
ERROR_PROBE = """<script>window.addEventListener('error', function (e) {
  var d = document.documentElement;
  d.setAttribute('data-js-errors', (d.getAttribute('data-js-errors') || '') + (e.message || 'error') + ';');
});</script>"""


def chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        message = "chromium is not installed (apt-get install -y chromium); the browser check needs it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def browse(url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """Chromium run headless on ``url`` with ``extra`` flags, in a fresh profile under ``tmp_path``."""
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run(
        [chromium(), *BROWSER_FLAGS, f"--user-data-dir={profile}", *extra, url],
        capture_output=True,
        text=True,
        timeout=60,
    )


def image_status(dom: str) -> tuple:
    """``(decoded, total)`` images, as the report's own script counted them in the dumped DOM."""
    m = re.search(r'<div id="img-status"[^>]*data-loaded="(\d*)" data-total="(\d*)"', dom)
    assert m, "no image status in the dumped DOM: the page's script did not run"
    return int(m.group(1)), int(m.group(2))


def probed(page: Path, out: Path) -> Path:
    """A copy of ``page`` at ``out`` with :data:`ERROR_PROBE` first in its head."""
    text = page.read_text(encoding="utf-8")
    assert "<head>" in text
    out.write_text(text.replace("<head>", "<head>" + ERROR_PROBE, 1), encoding="utf-8")
    return out


def js_errors(dom: str) -> str:
    """The script errors a probed page recorded ('' when none)."""
    found = re.search(r'<html[^>]*\sdata-js-errors="([^"]*)"', dom)
    return found.group(1) if found else ""
