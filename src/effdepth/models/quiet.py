"""Quiet loading: library chatter and progress bars held back while a model, tokenizer or copy
is loaded or written, so a run prints only its own lines. Errors still propagate."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings


@contextlib.contextmanager
def progress_bars(progress: bool):
    """``progress=False`` hides transformers' own bars while loading (``gguf.parse_once`` hides its own).

    >>> with progress_bars(False):
    ...     pass
    """
    if progress:
        yield
        return
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def quiet_loading():
    """Silence transformers' and the hub's log lines, warnings and prints while loading.

    >>> with quiet_loading():
    ...     print("not shown")
    """
    with errors_only("transformers", "huggingface_hub"), warnings.catch_warnings(), silenced_stdout():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def errors_only(*libraries: str):
    """Only errors from these libraries' loggers inside the block; the levels are restored after.

    >>> with errors_only("datasets"):
    ...     logging.getLogger("datasets").getEffectiveLevel() >= logging.ERROR
    True
    """
    loggers = [logging.getLogger(name) for name in libraries]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@contextlib.contextmanager
def silenced_stdout():
    """Hold back what a library prints while it writes files (e.g. ``save_pretrained``).

    >>> with silenced_stdout():
    ...     print("not shown")
    """
    with contextlib.redirect_stdout(io.StringIO()):
        yield
