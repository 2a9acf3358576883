"""Model suites: small YAML files naming the models a sweep measures.

A suite file::

    name: my-suite
    description: what it is for
    models:
      - {id: EleutherAI/pythia-70m, family: pythia, params: 70M}
      - {id: EleutherAI/pythia-160m, family: pythia, revision: step1000}
      - {id: "tiny:llama", family: llama}

Each model has an ``id`` (a Hugging Face ``owner/name``, or ``tiny:TYPE`` for
a tiny random model from :mod:`effdepth.models.tiny`), and optionally ``family``,
``revision``, ``params`` (a number or ``70M`` / ``1.4B``), ``note`` and ``paper``
(the model's name in the paper's Table 2, :mod:`effdepth.data.paper`).
Shipped suites: ``paper16`` and ``tiny`` (see :func:`suite_names`); any other
file is loaded by path.

>>> s = load_suite("tiny")
>>> s.models[0].id, s.models[0].is_tiny
('tiny:llama', True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.report.numbers import format_params
from effdepth.scale.revisions import check_revision

SUITE_KEYS = ("name", "description", "models")
MODEL_KEYS = ("id", "family", "revision", "params", "note", "paper")
TINY_PREFIX = "tiny:"

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_PARAMS = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMBT]?)$", re.IGNORECASE)
_SCALE = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


@dataclass(frozen=True)
class SuiteModel:
    """One model of a suite."""

    id: str
    family: str | None = None
    revision: str | None = None
    params: int | None = None
    note: str | None = None
    paper: str | None = None

    @property
    def is_tiny(self) -> bool:
        return self.id.startswith(TINY_PREFIX)

    @property
    def tiny_type(self) -> str:
        return self.id[len(TINY_PREFIX) :]


@dataclass(frozen=True)
class Suite:
    """A named list of models.

    >>> load_suite("paper16").families()
    ['pythia', 'olmo2', 'llama3', 'mistral', 'gemma3', 'qwen3.5']
    """

    name: str
    description: str = ""
    models: tuple = field(default_factory=tuple)
    source: str = ""

    def families(self) -> list[str]:
        return list(dict.fromkeys(m.family or "other" for m in self.models))

    def table(self) -> str:
        """A plain-text table of the models, for ``effdepth suite show``.

        >>> print(Suite("s", models=(SuiteModel("acme/m", family="m", params=70_000_000),)).table())
        id      family  revision  params
        ------  ------  --------  ------
        acme/m  m       main      70M
        """
        from effdepth.report.content import Cell, Table
        from effdepth.report.plain import table_text

        rows = [
            [Cell(m.id), Cell(m.family or "-"), Cell(m.revision or "main"), Cell(format_params(m.params))]
            for m in self.models
        ]
        return table_text(Table(["id", "family", "revision", "params"], rows, [False] * 4))


def suite_names() -> list[str]:
    """The suites shipped with effdepth.

    >>> "paper16" in suite_names() and "tiny" in suite_names()
    True
    """
    folder = resources.files(__name__)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_suite(name_or_path) -> Suite:
    """A shipped suite by name, or a suite file by path (``.yaml`` / ``.yml``).

    >>> len(load_suite("paper16").models)
    16
    """
    text = str(name_or_path)
    if text in suite_names():
        source = f"suite {text}"
        raw = (resources.files(__name__) / f"{text}.yaml").read_text(encoding="utf-8")
    else:
        path = Path(text).expanduser()
        if not path.is_file():
            raise EffdepthError(f"no suite {text!r}: not a shipped suite ({', '.join(suite_names())}) nor a suite file")
        source = str(path)
        try:
            raw = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise EffdepthError(f"cannot read suite file {path}: {exc}") from None
    return parse_suite(raw, source=source)


def parse_suite(text: str, source: str = "<suite>") -> Suite:
    """Parse and validate suite YAML; every problem is a one-line error naming where.

    >>> parse_suite("name: s\\nmodels: [{id: 'tiny:gpt2'}]").models[0].family
    'gpt2'
    >>> parse_suite("name: s\\nmodels: [{id: a/b, familly: x}]")
    Traceback (most recent call last):
    effdepth.errors.EffdepthError: <suite>: model 1: unknown key 'familly' (allowed: id, family, revision, params, note, paper)
    """
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise EffdepthError(f"{source}: not valid YAML{line}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise EffdepthError(f"{source}: a suite is a mapping with keys {', '.join(SUITE_KEYS)}")
    _check_keys(data, SUITE_KEYS, source)
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise EffdepthError(f"{source}: the suite needs a 'name'")
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise EffdepthError(f"{source}: 'models' must be a non-empty list of models")
    models = tuple(_parse_model(entry, f"{source}: model {i}") for i, entry in enumerate(entries, 1))
    _check_unique(models, source)
    return Suite(
        name=name.strip(), description=str(data.get("description") or "").strip(), models=models, source=source
    )


def check_model_id(model_id) -> str:
    """A hub ``owner/name`` or ``tiny:TYPE``; anything path-like is refused.

    >>> check_model_id("allenai/OLMo-2-1124-7B")
    'allenai/OLMo-2-1124-7B'
    >>> check_model_id("../etc")
    Traceback (most recent call last):
    effdepth.errors.EffdepthError: malformed model id '../etc': use a Hugging Face id (owner/name) or tiny:TYPE
    """
    from effdepth.models.tiny import TINY_MODEL_TYPES

    text = str(model_id)
    if text.startswith(TINY_PREFIX):
        kind = text[len(TINY_PREFIX) :]
        if kind not in TINY_MODEL_TYPES:
            raise EffdepthError(
                f"unknown tiny model {text!r}; available: {', '.join(TINY_PREFIX + t for t in TINY_MODEL_TYPES)}"
            )
        return text
    if not _HUB_ID.match(text) or ".." in text:
        raise EffdepthError(f"malformed model id {text!r}: use a Hugging Face id (owner/name) or tiny:TYPE")
    return text


def parse_params(value) -> int | None:
    """``70M`` -> 70_000_000; numbers pass through.

    >>> parse_params("1.4B"), parse_params(7e9), parse_params(None)
    (1400000000, 7000000000, None)
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise EffdepthError(f"params must be a number or like 70M / 1.4B, got {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    m = _PARAMS.match(str(value).strip())
    if not m:
        raise EffdepthError(f"params must be a number or like 70M / 1.4B, got {value!r}")
    return round(float(m[1]) * _SCALE[m[2].upper()])


def _parse_model(entry, where: str) -> SuiteModel:
    if isinstance(entry, str):
        entry = {"id": entry}
    if not isinstance(entry, dict):
        raise EffdepthError(f"{where}: expected a mapping like {{id: owner/name, family: ...}}, got {entry!r}")
    _check_keys(entry, MODEL_KEYS, where)
    if entry.get("id") in (None, ""):
        raise EffdepthError(f"{where}: missing 'id'")
    try:
        model_id = check_model_id(entry["id"])
        revision = None if entry.get("revision") is None else check_revision(str(entry["revision"]))
        params = parse_params(entry.get("params"))
    except EffdepthError as exc:
        raise EffdepthError(f"{where}: {exc}") from None
    if revision is not None and model_id.startswith(TINY_PREFIX):
        raise EffdepthError(f"{where}: tiny models have no revisions")
    family = entry.get("family")
    if family is None and model_id.startswith(TINY_PREFIX):
        family = model_id[len(TINY_PREFIX) :]
    note, paper = entry.get("note"), entry.get("paper")
    return SuiteModel(
        model_id,
        None if family is None else str(family),
        revision,
        params,
        None if note is None else str(note),
        None if paper is None else str(paper),
    )


def _check_keys(mapping: dict, allowed: tuple, where: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise EffdepthError(f"{where}: unknown key {key!r} (allowed: {', '.join(allowed)})")


def _check_unique(models: tuple, source: str) -> None:
    seen = set()
    for m in models:
        if (m.id, m.revision) in seen:
            raise EffdepthError(f"{source}: {m.id} (revision {m.revision or 'main'}) is listed twice")
        seen.add((m.id, m.revision))


def resolve_models(specs) -> list[SuiteModel]:
    """Models named on a command line: suite names, suite files, ids, ``tiny:TYPE`` or model folders.

    Repeats are dropped (first one kept).

    >>> [m.id for m in resolve_models(["tiny", "tiny:gpt2", "EleutherAI/pythia-70m"])][-2:]
    ['tiny:gemma2', 'EleutherAI/pythia-70m']
    """
    if isinstance(specs, (str, Path, SuiteModel, Suite)):
        specs = [specs]
    models: list[SuiteModel] = []
    for spec in specs:
        models += _models_of(spec)
    if not models:
        raise EffdepthError(
            "no models given; name a suite (" + ", ".join(suite_names()) + "), a suite file or model ids"
        )
    unique: dict = {}
    for m in models:
        unique.setdefault((m.id, m.revision), m)
    return list(unique.values())


def guess_family(model_id: str) -> str:
    """A family for a model named without one: the known series, else the hub owner.

    >>> guess_family("EleutherAI/pythia-160m-deduped"), guess_family("allenai/OLMo-2-1124-7B"), guess_family("acme/x")
    ('pythia', 'olmo2', 'acme')
    """
    name = str(model_id).lower()
    for marker, family in (("pythia", "pythia"), ("olmo-2", "olmo2"), ("qwen3.5", "qwen3.5")):
        if marker in name:
            return family
    if name.startswith(TINY_PREFIX):
        return name[len(TINY_PREFIX) :]
    return name.split("/", 1)[0] if "/" in name else "local"


def _models_of(spec) -> list[SuiteModel]:
    if isinstance(spec, SuiteModel):
        return [spec]
    if isinstance(spec, Suite):
        return list(spec.models)
    text = str(spec)
    if text in suite_names() or text.endswith((".yaml", ".yml")):
        return list(load_suite(text).models)
    if text.startswith(TINY_PREFIX):
        return [SuiteModel(check_model_id(text), family=guess_family(text))]
    path = Path(text).expanduser()
    if path.is_dir():
        return [SuiteModel(text, family="local")]
    if _HUB_ID.match(text) and ".." not in text:
        return [SuiteModel(text, family=guess_family(text))]
    raise EffdepthError(
        f"{text!r} is not a suite ({', '.join(suite_names())}), a suite file (.yaml), a model folder, "
        "tiny:TYPE or a Hugging Face id (owner/name)"
    )
