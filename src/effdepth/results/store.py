"""The pooled vectors of a passage-mode run, kept on disk beside its result (docs/method.md#passage-mode).

``pooled/`` holds ``{variant}.npy`` (float32 ``(L+1, N, d)``), ``token_sums.npy`` (float64 ``(N, L, 3)``),
``passages.npz`` (lengths, BOS, each passage's text identity where known) and ``store.json`` (shapes, variants, passages written), replaced atomically
after the memory-mapped arrays are flushed, so a stopped run resumes from the last recorded batch.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.results.files import write_json_atomic

POOLED_DIR = "pooled"
FORMAT = "effdepth.pooled/1"


class PooledStore:
    """Memory-mapped pooled vectors of N passages (see the module docstring).

    >>> import tempfile
    >>> s = PooledStore.create(Path(tempfile.mkdtemp()) / "p", ["default"], layers=3, width=2, lengths=np.ones(4, int),
    ...                        starts_with_bos=np.zeros(4, bool))
    >>> s.write([1, 3], {"default": np.ones((3, 2, 2))}, np.zeros((2, 2, 3))); s.commit()
    >>> PooledStore.open(s.folder).arrays()["default"][:, 1].tolist()
    [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    """

    def __init__(self, folder: Path, meta: dict, mode: str):
        self.folder = Path(folder)
        self.meta = meta
        self.filled = int(meta["written"])  # passages written so far, committed or not
        samples = meta.get("samples") or {}  # the token reduction: each variant's samples; else one per passage
        self._pooled = {
            v: np.lib.format.open_memmap(
                self.folder / f"{v}.npy",
                mode=mode,
                dtype=np.float32,
                shape=(meta["layers"], samples.get(v, meta["passages"]), meta["width"]),
            )
            if mode == "w+"
            else np.load(self.folder / f"{v}.npy", mmap_mode=mode)
            for v in meta["variants"]
        }
        sums_shape = (meta["passages"], meta["layers"] - 1, 3)
        self._sums = (
            np.lib.format.open_memmap(self.folder / "token_sums.npy", mode=mode, dtype=np.float64, shape=sums_shape)
            if mode == "w+"
            else np.load(self.folder / "token_sums.npy", mmap_mode=mode)
        )

    @classmethod
    def create(
        cls,
        folder,
        variants,
        *,
        layers: int,
        width: int,
        lengths,
        starts_with_bos,
        extra: dict | None = None,
        offsets: dict | None = None,
        identity: dict | None = None,
    ) -> "PooledStore":
        """A new store for the passages of ``lengths`` with ``layers`` states (S_0..S_L) of ``width`` features;
        ``offsets`` (the token reduction) says, per variant, where each passage's samples start (N+1);
        ``identity`` is the passages' text identity (:attr:`identity`)."""
        folder = Path(folder)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        np.savez(
            folder / "passages.npz",
            lengths=np.asarray(lengths, dtype=np.int64),
            starts_with_bos=np.asarray(starts_with_bos, dtype=bool),
            **{f"offsets|{v}": np.asarray(o, dtype=np.int64) for v, o in (offsets or {}).items()},
            **{
                f"identity|{k}": np.asarray(v, dtype="<U64" if k == "text_sha256" else np.int64)
                for k, v in (identity or {}).items()
            },
        )
        meta = {
            "format": FORMAT,
            "variants": list(variants),
            "layers": int(layers),
            "passages": len(lengths),
            "width": int(width),
            "dtype": "float32",
            "written": 0,
            **({"reduction": "tokens", "samples": {v: int(o[-1]) for v, o in offsets.items()}} if offsets else {}),
            **(extra or {}),
        }
        store = cls(folder, meta, "w+")
        write_json_atomic(folder / "store.json", meta)
        return store

    @classmethod
    def open(cls, folder, *, writable: bool = False) -> "PooledStore":
        """An existing store; a one-line error when it is missing or damaged."""
        folder = Path(folder)
        try:
            meta = json.loads((folder / "store.json").read_text())
            if meta.get("format") != FORMAT:
                raise ValueError(f"format {meta.get('format')!r}")
            return cls(folder, meta, "r+" if writable else "r")
        except (OSError, ValueError, KeyError) as exc:
            raise EffdepthError(
                f"no readable pooled vectors in {folder} ({type(exc).__name__}: {exc}); "
                "measure again (effdepth measure ... --out DIR) to have them"
            ) from None

    @property
    def written(self) -> int:
        return int(self.meta["written"])

    def write(self, indices, samples: dict, sums) -> None:
        """Put one batch at its passages' rows: ``samples`` ``{variant: (L+1, s, d)}`` (the passages' samples
        back to back, one each but for the token reduction), ``sums`` (L, B, 3)."""
        rows = np.asarray(indices, dtype=np.int64)
        for name in self.meta["variants"]:
            offsets = self.offsets(name)
            at = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in rows] or [np.zeros(0, np.int64)])
            self._pooled[name][:, at] = np.asarray(samples[name], dtype=np.float32)
        self._sums[rows] = np.asarray(sums, dtype=np.float64).transpose(1, 0, 2)
        self.filled += len(rows)

    def offsets(self, variant: str) -> np.ndarray:
        """``(N+1,)`` where each passage's rows start in ``variant``'s array (one row each but for the token reduction).

        >>> import tempfile
        >>> s = PooledStore.create(Path(tempfile.mkdtemp()) / "p", ["default"], layers=2, width=1, lengths=[2, 3],
        ...                        starts_with_bos=[False, False], offsets={"default": [0, 2, 5]})
        >>> s.offsets("default").tolist(), s.arrays()["default"].shape
        ([0, 2, 5], (2, 5, 1))
        """
        if self.meta.get("reduction") != "tokens":
            return np.arange(self.meta["passages"] + 1, dtype=np.int64)
        with np.load(self.folder / "passages.npz") as data:
            return data[f"offsets|{variant}"]

    @property
    def reduction(self) -> str:
        """``mean`` (one pooled vector per passage) or ``tokens`` (sampled tokens)."""
        return self.meta.get("reduction", "mean")

    def commit(self) -> None:
        """Flush the arrays, then record that the passages written so far (the first of the order) are in them."""
        for array in (*self._pooled.values(), self._sums):
            array.flush()
        self.meta["written"] = self.filled
        write_json_atomic(self.folder / "store.json", self.meta)

    def arrays(self) -> dict:
        """``{variant: (L+1, N, d) float32}``, memory-mapped."""
        return dict(self._pooled)

    @property
    def token_sums(self) -> np.ndarray:
        return self._sums

    @property
    def lengths(self) -> np.ndarray:
        with np.load(self.folder / "passages.npz") as data:
            return data["lengths"]

    @property
    def identity(self) -> dict | None:
        """Each passage's text identity, ``{"document", "start", "end": int64 (N,), "text_sha256": str (N,)}``,
        or ``None`` where it was unknown or the store was written before effdepth kept it.

        >>> import tempfile
        >>> ident = {"document": [0, 0], "start": [0, 5], "end": [5, 9], "text_sha256": ["a" * 64, "b" * 64]}
        >>> s = PooledStore.create(Path(tempfile.mkdtemp()) / "p", ["default"], layers=2, width=1, lengths=[2, 3],
        ...                        starts_with_bos=[False, False], identity=ident)
        >>> s.identity["end"].tolist(), str(s.identity["text_sha256"][1])[:3]
        ([5, 9], 'bbb')
        """
        with np.load(self.folder / "passages.npz") as data:
            fields = {k.split("|", 1)[1]: data[k] for k in data.files if k.startswith("identity|")}
        return fields or None

    def close(self) -> None:
        self._pooled.clear()
        self._sums = None


def place_pooled(source: Path, target: Path) -> Path:
    """Put a result's pooled vectors at ``target``, replacing an older store there whole: moved when
    :func:`mark_movable` allows (the emptied folder is removed), else copied; nothing when already there."""
    source, target = Path(source).resolve(), Path(target)
    if source == target.resolve():
        return target
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    if source in _MOVABLE:
        _MOVABLE.discard(source)
        try:
            source.rename(staging)
        except OSError:  # another filesystem
            shutil.copytree(source, staging)
            shutil.rmtree(source, ignore_errors=True)
        with contextlib.suppress(OSError):
            source.parent.rmdir()  # the temporary or checkpoint folder, when nothing else is in it
    else:
        shutil.copytree(source, staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


_MOVABLE: set = set()


def mark_movable(folder: Path) -> None:
    """The pooled vectors of a finished run, in a place of the run's own: the result may move them."""
    _MOVABLE.add(Path(folder).resolve())


def temporary_folder() -> Path:
    """A new temporary folder for a run's pooled vectors."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="effdepth-pooled-")).resolve()
