"""The checks of single options and of their combinations: one-line errors before anything loads."""

from __future__ import annotations

import math
import re
from pathlib import Path

from effdepth.data.passages import BOS_CHOICES, SPLITS
from effdepth.errors import EffdepthError
from effdepth.options.defaults import DEFAULTS, MAX_BOOTSTRAP, POOLINGS, STATES


def at_least(minimum: int, message: str):
    """A check that raises ``message`` (``{v}``: the value) unless the value is a whole number >= ``minimum``.

    >>> at_least(1, "--k must be >= 1, got {v}")(0)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --k must be >= 1, got 0
    """

    def check(value):
        if not is_whole(value) or int(value) < minimum:
            raise EffdepthError(message.format(v=value))

    return check


def is_whole(value) -> bool:
    """A whole number, not a bool.

    >>> is_whole(3), is_whole(3.0), is_whole(3.5), is_whole(True)
    (True, True, False, False)
    """
    if isinstance(value, bool):
        return False
    try:
        return int(value) == value
    except (TypeError, ValueError, OverflowError):
        return False


#: Fewer resamples cannot bound a 95% percentile interval: the point estimate falls outside the
#: range of B resamples about 2 * 0.5^B of the time (always for one).
MIN_BOOTSTRAP = 10


def _check_bootstrap(value) -> None:
    if not is_whole(value) or not (int(value) == 0 or MIN_BOOTSTRAP <= int(value) <= MAX_BOOTSTRAP):
        raise EffdepthError(
            f"--bootstrap must be 0 (off) or a number of resamples from {MIN_BOOTSTRAP} to {MAX_BOOTSTRAP:,} "
            f"(default {DEFAULTS['bootstrap']:,}), got {value}: fewer cannot bound a 95% interval"
        )


def _check_choice(flag: str, choices):
    def check(value):
        if value not in choices:
            raise EffdepthError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")

    return check


#: Byte units, lower-cased: decimal (k, kb, m, mb, ...) and binary (kib, mib, ...); a bare number is bytes.
_UNITS = {"": 1, "b": 1} | {
    name: base**power
    for power, prefix in enumerate("kmgt", 1)
    for name, base in ((prefix, 1000), (prefix + "b", 1000), (prefix + "ib", 1024))
}


def parse_bytes(value) -> int:
    """``4GiB``, ``500MB``, ``1e9`` or a number of bytes -> bytes.

    >>> parse_bytes("4GiB"), parse_bytes("500MB"), parse_bytes(1024)
    (4294967296, 500000000, 1024)
    """
    not_a_size = EffdepthError(f"--max-memory must be a size such as 4GiB, 500MB or a number of bytes, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number, unit = float(value), ""
    else:
        m = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([A-Za-z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise not_a_size
        try:
            number, unit = float(m.group(1)), m.group(2).lower()
        except ValueError:  # "1.2.3GB", "."
            raise not_a_size from None
    if not math.isfinite(number * _UNITS[unit]):
        raise EffdepthError(f"--max-memory must be a finite size, got {value!r}")
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise EffdepthError(f"--max-memory must be positive, got {value!r}")
    return size


_CHECKS = {
    "seq_len": at_least(
        2, "--seq-len must be at least 2 (the drop-pos0 control needs a token after position 0), got {v}"
    ),
    "num_seqs": at_least(1, "--num-seqs must be at least 1, got {v}"),
    "batch_size": at_least(1, "--batch-size must be at least 1, got {v}"),
    "seed": at_least(0, "--seed must be a non-negative integer, got {v}"),
    "bootstrap": _check_bootstrap,
    "pooling": _check_choice("--pooling", POOLINGS),
    "states": _check_choice("--states", STATES),
    "bos": _check_choice("--bos", BOS_CHOICES),
    "passage_split": _check_choice("--passage-split", SPLITS),
    "bootstrap_units": at_least(2, "--bootstrap-units must be at least 2, got {v}"),
}


def validate_options(**values) -> None:
    """One-line errors for measurement options, before anything is loaded.

    >>> validate_options(seq_len=256, bootstrap=1000)
    >>> validate_options(seq_len=1)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --seq-len must be at least 2 (the drop-pos0 control needs a token after position 0), got 1
    """
    for name, value in values.items():
        _CHECKS[name](value)


def check_revision_target(model, revision) -> None:
    """Revisions belong to hub models: refuse one for a local folder, a ``.gguf`` file or a loaded model.

    >>> check_revision_target("EleutherAI/pythia-70m", "step1000")
    >>> check_revision_target("model.gguf", "main")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --revision main applies to Hugging Face hub models, not to model.gguf; drop --revision (a local folder or .gguf file is one fixed set of weights)
    """
    if revision is None:
        return
    if model is None:
        what = "the embedded SmolLM2 model"
    elif not isinstance(model, (str, Path)):
        what = f"an already loaded {type(model).__name__}"
    elif str(model).endswith(".gguf") or Path(str(model)).expanduser().exists():
        what = str(model)
    else:
        return
    raise EffdepthError(
        f"--revision {revision} applies to Hugging Face hub models, not to {what}; "
        "drop --revision (a local folder or .gguf file is one fixed set of weights)"
    )


def check_tokenizer_spec(tokenizer) -> None:
    """A ``tokenizer`` given as a path that is not there fails now, before the model loads.

    >>> check_tokenizer_spec("EleutherAI/pythia-70m")
    """
    if isinstance(tokenizer, str):
        from effdepth.models.loading import check_tokenizer_path

        check_tokenizer_path(tokenizer)


def check_device(device) -> None:
    """A device that is not there fails now, not after the model has loaded.

    >>> check_device("cpu")
    """
    if device in (None, "auto", "cpu"):
        return
    from effdepth.models.loading import resolve_device

    resolve_device(device)


def check_dtype(dtype) -> None:
    """An unknown dtype fails now, not after the model has loaded.

    >>> check_dtype("bfloat16")
    """
    if dtype is None or dtype == "auto" or not isinstance(dtype, str):
        return
    from effdepth.models.loading import DTYPES

    if dtype.lower() not in DTYPES:
        raise EffdepthError(f"unknown dtype {dtype!r}; choose from float32, bfloat16, float16")
