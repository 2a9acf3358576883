"""The code version every result records: the commit of the checkout effdepth runs from."""

import subprocess
from pathlib import Path

import pytest

import effdepth
from effdepth.results.provenance import code_version

CHECKOUT = Path(effdepth.__file__).resolve().parents[2]


@pytest.mark.skipif(not (CHECKOUT / ".git").exists(), reason="effdepth is not running from a git checkout")
def test_a_result_from_a_checkout_records_its_commit_and_whether_it_was_modified():
    head = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    version = code_version()
    assert version["git_commit"] == head.strip() and len(head.strip()) == 40
    assert isinstance(version["git_dirty"], bool)
