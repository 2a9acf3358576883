"""Loading for a measurement: a model and a corpus -> the passages to run.

What can be checked in seconds (the corpus, the hub or the cache, the sequence length) is checked before
the weights load.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from effdepth.errors import EffdepthError, tokenizer_hint
from effdepth.models.external import adapt_external
from effdepth.models.registry import resolve_architecture
from effdepth.options import LoadOptions, Options


def stored_carry(model) -> dict | None:
    """A checkpoint trained with a residual carry is not measured as trained at lam = 1: say so, and record it."""
    config = getattr(model, "config", None)
    lam = getattr(config, "effdepth_carry", None)
    if lam is None or float(lam) == 1.0:
        return None
    layers = getattr(config, "effdepth_carry_layers", None) or "all"
    layers = layers if isinstance(layers, str) else ",".join(str(x) for x in layers)
    warnings.warn(
        f"this checkpoint was trained with residual carry {float(lam):g} in blocks {layers}, but a plain measurement runs it "
        f"with carry 1 (the unmodified stream); to measure it as trained: effdepth intervene MODEL --carry {float(lam):g} "
        f"--layers {layers}, or effdepth.studies.experiment.measure_checkpoint(path)",
        UserWarning,
        stacklevel=3,
    )
    return {"carry": float(lam), "layers": layers, "applied": False}


@dataclass
class Prepared:
    """A loaded model, its resolved architecture, the passages to run (``tokens``) and the options they came from."""

    lm: object
    arch: object
    tokens: object
    load: LoadOptions = field(default_factory=LoadOptions)

    @property
    def add_bos(self) -> bool:
        return self.load.add_bos


def prepare(load: LoadOptions | Options, *, progress: bool = True, check_passages=None) -> Prepared:
    """Load the model and the corpus (as Passages) once, for one or several measurements. ``check_passages``:
    called with the passages before the weights load, to refuse them in seconds (``compare`` measuring a model
    on a saved result's passages refuses passages that would not pair).

    >>> import torch
    >>> from effdepth.models.tiny import tiny_model
    >>> p = prepare(LoadOptions(model=tiny_model("llama"), corpus=torch.randint(0, 256, (4, 8))), progress=False)
    >>> p.arch.num_layers, p.tokens.num_passages
    (3, 4)
    """
    from effdepth.data.corpus import is_token_ids
    from effdepth.data.passages import load_passages
    from effdepth.models.hub import check_measure_inputs
    from effdepth.models.loading import (
        ModelSource,
        check_sequence_length,
        load_model,
        load_tokenizer,
        locate_model,
        prepare_source,
        source_config,
    )

    load = load.load if isinstance(load, Options) else load
    # TransformerLens and nnsight objects (None for anything else): measured through their own hooks or module.
    external = adapt_external(load.model, allow_processed=load.allow_processed)
    source, tokenizer = load.model, load.tokenizer
    if external is not None:
        source = external.model
        tokenizer = tokenizer if tokenizer is not None else external.tokenizer
    if isinstance(tokenizer, (str, Path)):  # --tokenizer PATH_OR_ID
        tokenizer = load_tokenizer(tokenizer)
    # Tokenizer and corpus first: a bad corpus fails in seconds, before the weights load.
    if not isinstance(source, torch.nn.Module):
        if not isinstance(source, ModelSource):
            source = locate_model(source, revision=load.revision, trust_remote_code=load.trust_remote_code)
    # Offline, or with no way to the hub: fail in seconds when the cache lacks the model or corpus.
    on_hub = isinstance(source, ModelSource) and source.info.get("source") == "hub"
    check_measure_inputs(
        source.info["id"] if on_hub else None,
        source.kwargs.get("revision") if on_hub else None,
        load.corpus,
        allow_pickle=load.allow_pickle,
    )
    if not isinstance(source, torch.nn.Module):
        # A .gguf file's first load: parsed once into a dequantised copy that config, tokenizer and weights load from.
        source = prepare_source(source, progress=progress)
        if not load.allow_long and not is_token_ids(load.corpus) and (config := source_config(source)) is not None:
            check_sequence_length(load.seq_len, config, source.info.get("id") or "the model")
        if tokenizer is None:
            tokenizer = load_tokenizer(source)
            if tokenizer is None and not is_token_ids(load.corpus):
                label = (
                    load.corpus if isinstance(load.corpus, str) else "shakespeare" if load.corpus is None else "texts"
                )
                raise EffdepthError(
                    f"model {source.info.get('id')!r} has no tokenizer effdepth can load, and corpus "
                    f"'{label}' is text; {tokenizer_hint()}"
                )
    tokens = load_passages(
        load.corpus,
        tokenizer,
        max_len=load.seq_len,
        num_passages=load.num_seqs,
        seed=load.seed,
        bos=load.bos,
        split=load.passage_split,
    )
    if check_passages is not None:
        check_passages(tokens)

    if external is not None and external.architecture is not None:  # TransformerLens runs through its own hooks
        lm, arch = external.loaded(dtype=load.dtype, device=load.device), external.architecture
    else:
        lm = load_model(
            source,
            dtype=load.dtype,
            device=load.device,
            device_map=load.device_map,
            tokenizer=tokenizer,
            allow_pickle=load.allow_pickle,
            progress=progress,
        )
        arch = resolve_architecture(lm.model, blocks_path=load.blocks_path, embedding_path=load.embedding_path)
        if external is not None:  # nnsight: recorded in the provenance
            lm.info.update(external.info)
    _check_vocabulary(torch.from_numpy(tokens.ids), lm.info.get("vocab_size"))
    if not load.allow_long:
        longest = int(tokens.lengths.max())
        check_sequence_length(longest, getattr(lm.model, "config", None), lm.info.get("id") or "the model")
    return Prepared(lm, arch, tokens, load)


def _check_vocabulary(input_ids: torch.Tensor, vocab_size: int | None) -> None:
    if vocab_size is not None and input_ids.numel() and int(input_ids.max()) >= vocab_size:
        raise EffdepthError(
            f"token id {int(input_ids.max())} is outside the model's vocabulary of {vocab_size}; "
            "were the ids made with another tokenizer?"
        )
