"""Dequantised copies of ``.gguf`` files, kept in the effdepth cache so a GGUF model loads in seconds.

transformers de-quantises every tensor on each load (about 30 s for SmolLM2's 98 MB). The first load
saves a float32 copy in ``$EFFDEPTH_CACHE/gguf/<first 16 hex of its sha256>/``, written atomically (its
manifest of every file's size, mtime and sha256 last) and checked on every load: a damaged copy is rebuilt.

float32 because the de-quantised values are not exact in 16 bits (0.54 GB for SmolLM2-135M); delete
``gguf/`` under the cache to reclaim the space.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from effdepth.data.assets import _display, cache_dir, remove_stale
from effdepth.errors import EffdepthError
from effdepth.models.quiet import progress_bars, quiet_loading, silenced_stdout
from effdepth.numerics.hsic_plan import byte_size
from effdepth.results.files import file_sha256 as _sha256  # unmemoised; file_sha256 below memoises large files
from effdepth.results.files import write_json_atomic
from effdepth.results.provenance import package_version

GGUF_DIR = "gguf"
MANIFEST = "effdepth-gguf.json"
MANIFEST_FORMAT = 1
GGUF_MAGIC = b"GGUF"
# Files smaller than this hash in well under a second and are not memoised (no memo per test file).
_MEMO_MIN_BYTES = 64 << 20


def copies_dir() -> Path:
    """The folder of dequantised GGUF copies: ``gguf/`` under :func:`~effdepth.data.assets.cache_dir`.

    >>> copies_dir().name
    'gguf'
    """
    return cache_dir() / GGUF_DIR


def copy_folder(sha256: str) -> Path:
    """Where the dequantised copy of the GGUF file with this sha256 lives.

    >>> copy_folder("ab" * 32).name
    'abababababababab'
    """
    return copies_dir() / sha256[:16]


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file; that of a large one is memoised in the cache per (path, size, mtime).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "x.gguf"
    >>> _ = p.write_bytes(b"GGUF")
    >>> file_sha256(p)[:12]
    'b83633aa7853'
    """
    path = Path(path).resolve()
    stat = path.stat()
    if stat.st_size < _MEMO_MIN_BYTES:
        return _sha256(path)
    memo = copies_dir() / "hashes" / (hashlib.sha256(str(path).encode()).hexdigest()[:16] + ".json")
    key = {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    try:
        saved = json.loads(memo.read_text())
        if {k: saved.get(k) for k in key} == key and len(saved.get("sha256", "")) == 64:
            return saved["sha256"]
    except (OSError, ValueError, AttributeError):
        pass
    digest = _sha256(path)
    with contextlib.suppress(OSError, EffdepthError):  # a read-only cache only costs the hash next time
        write_json_atomic(memo, {**key, "sha256": digest})
    return digest


def find_copy(gguf: str | Path, sha256: str) -> Path | None:
    """The folder of a complete, undamaged copy of ``gguf``, or ``None`` (a damaged one is reported and removed).

    >>> find_copy("model.gguf", "0" * 64) is None
    True
    """
    folder = copy_folder(sha256)
    if not folder.exists():
        return None
    problem = _check_copy(folder, sha256)
    if problem is None:
        return folder
    discard_to_rebuild(gguf, folder, f"is damaged ({problem})")
    return None


def copy_info(folder: Path) -> dict:
    """What a copy's manifest records about how it was made (for a result's provenance).

    >>> copy_info(Path("/nonexistent"))
    {}
    """
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return {k: manifest.get(k) for k in ("created", "converted_with", "dtype")}


@dataclass
class Converted:
    """The copy's folder, or (when it could not be saved) ``None`` and the model and tokenizer loaded."""

    folder: Path | None
    model: object = None
    tokenizer: object = None


def convert(gguf: str | Path, sha256: str, *, progress: bool = True) -> Converted:
    """Parse ``gguf`` once, de-quantise it to float32 and keep model and tokenizer in its copy folder; when the
    copy cannot be saved (a read-only cache, a full disk), one line says why and they are returned instead.

    >>> import contextlib, io, tempfile
    >>> from unittest import mock
    >>> from effdepth.models.tiny import tiny_gguf
    >>> p = tiny_gguf(Path(tempfile.mkdtemp()) / "tiny.gguf")
    >>> with mock.patch.dict(os.environ, {"EFFDEPTH_CACHE": str(p.parent / "cache")}), contextlib.redirect_stderr(io.StringIO()):
    ...     done = convert(p, file_sha256(p), progress=False)
    ...     sorted(f.name for f in done.folder.iterdir())[:3], find_copy(p, file_sha256(p)) == done.folder
    (['config.json', 'effdepth-gguf.json', 'generation_config.json'], True)
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    check_gguf_header(gguf)
    final = copy_folder(sha256)
    where, name = str(gguf.parent), gguf.name
    try:
        with quiet_loading(), progress_bars(progress), parse_once(progress):
            config = AutoConfig.from_pretrained(
                where, gguf_file=name
            )  # a truncated file fails here, before the line below
            print(
                f"effdepth: converting {gguf.name} to a float32 copy in {_display(final)}, once "
                "(later runs load the copy in seconds)",
                file=sys.stderr,
                flush=True,
            )
            try:
                tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
            except Exception:
                tokenizer = None  # a tokenizer-less file: text corpora then ask for --tokenizer
            model = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, config=config, dtype=torch.float32)
    except EffdepthError:
        raise
    except Exception as exc:
        raise EffdepthError(unreadable_gguf(gguf, exc)) from None
    model.eval()
    # A GGUF-loaded model carries its quantizer, which refuses to save; the weights are plain float32 now.
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    try:
        _save_copy(model, tokenizer, gguf, sha256, final)
    except OSError as exc:
        print(
            f"effdepth: cannot keep a dequantised copy of {gguf.name} in {_display(final.parent)} "
            f"({exc.strerror or exc}); loading from the GGUF file each run (set EFFDEPTH_CACHE to a writable folder "
            "with room for it)",
            file=sys.stderr,
            flush=True,
        )
        return Converted(None, model, tokenizer)
    return Converted(final)


def check_gguf_header(path: Path) -> None:
    """A one-line error unless ``path`` starts with the GGUF magic bytes.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "bad.gguf"
    >>> _ = p.write_bytes(b"<html>")
    >>> check_gguf_header(p)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: bad.gguf is not a GGUF file (it does not start with the bytes GGUF); check that the download finished and is the .gguf file itself
    """
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise EffdepthError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise EffdepthError(
            f"{path.name} is not a GGUF file (it does not start with the bytes GGUF); "
            "check that the download finished and is the .gguf file itself"
        )


def unreadable_gguf(path: Path, exc: Exception) -> str:
    """The one-line message for a GGUF file transformers could not read.

    >>> print(unreadable_gguf(Path("m.gguf"), ValueError("cannot reshape array of size 3")))
    could not load model m.gguf: the GGUF file cannot be read (ValueError: cannot reshape array of size 3); it may be truncated or damaged (compare its size and sha256 with the original, or download it again), or of an architecture transformers cannot load from GGUF
    """
    reason = " ".join(str(exc).split())[:200] or "no message"
    return (
        f"could not load model {path.name}: the GGUF file cannot be read ({type(exc).__name__}: {reason}); "
        "it may be truncated or damaged "
        "(compare its size and sha256 with the original, or download it again), or of an architecture "
        "transformers cannot load from GGUF"
    )


@contextlib.contextmanager
def parse_once(progress: bool = True):
    """Within this block transformers parses each GGUF file once; ``progress=False`` hides its bar.

    >>> import gguf, tempfile
    >>> from effdepth.models.tiny import tiny_gguf
    >>> p = tiny_gguf(Path(tempfile.mkdtemp()) / "tiny.gguf")
    >>> with parse_once():
    ...     gguf.GGUFReader(str(p)) is gguf.GGUFReader(str(p))
    True
    >>> gguf.GGUFReader(str(p)) is gguf.GGUFReader(str(p))
    False
    """
    import gguf
    import transformers.modeling_gguf_pytorch_utils as legacy

    saved = gguf.GGUFReader, gguf.get_tensor_name_map, legacy.tqdm
    real_reader, real_names, real_tqdm = saved
    readers: dict = {}

    def reader(path, *args, **kwargs):
        key = (os.path.realpath(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = real_reader(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(real_names)
    if not progress:
        legacy.tqdm = functools.partial(real_tqdm, disable=True)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map, legacy.tqdm = saved
        readers.clear()


# --------------------------------------------------------------------------- the copy on disk


def _save_copy(model, tokenizer, gguf: Path, sha256: str, final: Path) -> None:
    """Write the copy into a staging folder, then rename it into place (OSError when it cannot)."""

    parent = final.parent
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale(parent, ".tmp-*", ".trash-*")
    need = sum(p.numel() * p.element_size() for p in model.parameters()) + (64 << 20)
    free = shutil.disk_usage(parent).free
    if free < need:
        raise OSError(28, f"{byte_size(free, 'GiB')} free, the copy needs {byte_size(need, 'GiB')}")
    # mkdir, not mkdtemp: the copy keeps the umask's permissions, so a shared cache stays shared.
    staging = parent / f".tmp-{final.name}-{os.getpid()}-{time.monotonic_ns()}"
    staging.mkdir()
    try:
        # "Writing model shards": our one line said it all.
        with progress_bars(False), silenced_stdout():
            model.save_pretrained(staging)
            if tokenizer is not None:
                tokenizer.save_pretrained(staging)
        probe = staging / ".mode"
        probe.touch()
        mode = probe.stat().st_mode & 0o777  # what the umask gives a new file (some writers use 0600)
        probe.unlink()
        files = {}
        for f in sorted(p for p in staging.iterdir() if p.is_file()):
            f.chmod(mode)
            stat = f.stat()
            files[f.name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": _sha256(f)}
        import transformers

        from effdepth.results.version import __version__

        manifest = {
            "format": MANIFEST_FORMAT,
            "gguf": {"name": gguf.name, "path": str(gguf.resolve()), "sha256": sha256, "size": gguf.stat().st_size},
            "dtype": "float32",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "converted_with": {
                "effdepth": __version__,
                "transformers": transformers.__version__,
                "gguf": package_version("gguf"),
            },
            "files": files,
        }
        write_json_atomic(staging / MANIFEST, manifest)
        (staging / MANIFEST).chmod(mode)
        _install(staging, final, sha256)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _install(staging: Path, final: Path, sha256: str) -> None:
    try:
        os.replace(staging, final)
    except OSError:
        # Another run installed its copy first (a folder cannot replace a non-empty one): use it.
        if _check_copy(final, sha256) is not None:
            raise


def _check_copy(folder: Path, sha256: str) -> str | None:
    """Why the copy in ``folder`` cannot be used, or ``None`` when it can."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
        recorded = manifest["gguf"]["sha256"]
    except FileNotFoundError:
        return f"no {MANIFEST}"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{MANIFEST} is unreadable"
    if recorded != sha256:
        return f"it was made from another file (sha256 {str(recorded)[:16]}...)"
    if manifest.get("format") != MANIFEST_FORMAT:
        return f"it was written in another format ({manifest.get('format')})"
    touched = False
    for name, want in files.items():
        try:
            stat = (folder / name).stat()
        except OSError:
            return f"{name} is missing"
        if stat.st_size != want["size"]:
            return f"{name} is {stat.st_size:,} bytes, {want['size']:,} expected"
        # An untouched file is trusted; hashing 0.5 GB every run would cost a second.
        if stat.st_mtime_ns != want["mtime_ns"]:
            if _sha256(folder / name) != want["sha256"]:
                return f"{name} was changed: its sha256 no longer matches"
            want["mtime_ns"], touched = stat.st_mtime_ns, True
    if not any(n.endswith(".safetensors") for n in files):
        return "it holds no weights"
    if touched:  # same bytes, new mtimes (a copied cache): record them so the next run need not hash again
        with contextlib.suppress(OSError, EffdepthError):
            write_json_atomic(folder / MANIFEST, manifest)
    return None


def discard_to_rebuild(gguf, folder: Path, problem: str) -> None:
    """Say in one line on stderr what is wrong with a copy (it is rebuilt from its GGUF file), and discard it."""
    print(
        f"effdepth: the dequantised copy of {Path(gguf).name} in {_display(folder)} {problem}; "
        "rebuilding it from the GGUF file",
        file=sys.stderr,
        flush=True,
    )
    discard_copy(folder)


def discard_copy(folder: Path) -> None:
    """Move a damaged copy aside (one rename) and delete it: a concurrent run never sees it half deleted.

    >>> discard_copy(Path("no/such/copy"))  # gone already: nothing to do
    """
    trash = folder.with_name(f".trash-{folder.name}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.replace(folder, trash)
    except OSError:
        return  # gone already, or replaced by a run that rebuilt it
    shutil.rmtree(trash, ignore_errors=True)
