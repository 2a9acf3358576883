"""What a command will read from the hub, checked before the first forward pass: :func:`check_available`
(from the hub or the cache, else one line), :func:`check_on_hub` (online, before anything downloads) and
:func:`fetch_command` (the ``effdepth fetch`` line that fills the cache).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from effdepth.errors import EffdepthError
from effdepth.models.hub.cache import (
    SHAKESPEARE,
    corpus_missing,
    hub_cache,
    model_missing,
    parse_hf_corpus,
    pickle_only,
    pickle_refusal,
    weight_files,
)
from effdepth.models.hub.network import (
    forget_probe,
    hub_answer,
    hub_error_message,
    hub_problem,
    is_network_error,
    is_offline,
    is_transient,
    quiet_hub,
    set_offline,
    unreachable_message,
)

# --------------------------------------------------------------------------- the check before measuring


@dataclass(frozen=True)
class Need:
    """Something a command will read from the hub: a model at a revision, or a corpus.

    >>> Need("model", "EleutherAI/pythia-70m", "step1000").what, Need("corpus", "hf:wiki").what
    ("model 'EleutherAI/pythia-70m' at revision 'step1000'", "corpus 'hf:wiki'")
    """

    kind: str  # "model" or "corpus"
    name: object
    revision: str | None = None
    allow_pickle: bool = False

    @property
    def what(self) -> str:
        if self.kind == "corpus":
            return f"corpus {self.name if self.name is not None else SHAKESPEARE!r}"
        at = "" if self.revision in (None, "main") else f" at revision {self.revision!r}"
        return f"model {self.name!r}{at}"

    @property
    def from_hub(self) -> bool:
        return self.kind == "model" or parse_hf_corpus(self.name) is not None

    def missing(self, cache_dir=None) -> str | None:
        """``None`` when the cache holds it, else what is missing."""
        if self.kind == "model":
            return model_missing(str(self.name), self.revision, allow_pickle=self.allow_pickle, cache_dir=cache_dir)
        return corpus_missing(self.name)


def check_available(needs, *, fix: str, cache_dir=None) -> None:
    """Fail now, in one line, when ``needs`` can come neither from the hub nor from the cache.

    Offline: every missing need is listed at once. Online, the hub is probed once (when a need is on it);
    when it cannot be reached, the command goes offline if the cache holds everything (one note on
    stderr), else stops here. ``fix`` is the ``effdepth fetch`` command that fills the cache.

    >>> from effdepth.models.hub.network import offline
    >>> check_available([Need("corpus", "notes.txt")], fix="effdepth fetch x")
    >>> with offline():
    ...     check_available([Need("model", "nobody/nothing")], fix="effdepth fetch nobody/nothing")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    effdepth.errors.EffdepthError: could not load model 'nobody/nothing' (not cached) offline (--offline or HF_HUB_OFFLINE=1): ...
    """
    needs = list({(n.kind, n.what): n for n in needs}.values())
    if not is_offline():
        remote = [n for n in needs if n.from_hub]
        if not remote:
            return
        problem = hub_problem()
        if problem is None:
            return
        lost = _missing(remote, cache_dir)
        if lost:
            raise EffdepthError(
                unreachable_message(
                    problem,
                    f", and the local cache {hub_cache(cache_dir)} lacks {_listing(lost, len(remote))}",
                    f"run `{fix}` on a machine with internet (a login node), then add --offline here",
                )
            )
        _note(f"the Hugging Face hub cannot be reached ({problem}); reading the local cache only, as with --offline")
        set_offline(True)
        return
    lost = _missing(needs, cache_dir)
    if lost:
        raise EffdepthError(
            f"could not load {_listing(lost, len(needs))} offline (--offline or HF_HUB_OFFLINE=1): the local cache is "
            f"{hub_cache(cache_dir)}; run `{fix}` on a machine with internet (a login node) first"
        )


def _missing(needs, cache_dir) -> list[tuple[Need, str]]:
    return [(n, why) for n in needs if (why := n.missing(cache_dir)) is not None]


def _listing(lost: list, total: int, shown: int = 6) -> str:
    """``"model 'a' (why), corpus 'b' (why)"``, and how many of how many when not all are missing.

    >>> _listing([(Need("model", "a/b"), "not cached")], 3)
    "model 'a/b' (not cached) [1 of 3 needed]"
    """
    items = ", ".join(f"{n.what} ({why})" for n, why in lost[:shown])
    more = f" and {len(lost) - shown} more" if len(lost) > shown else ""
    count = "" if len(lost) == total else f" [{len(lost)} of {total} needed]"
    return f"{items}{more}{count}"


_NOTED: set = set()


def _note(text: str) -> None:
    if text not in _NOTED:
        _NOTED.add(text)
        print(f"effdepth: {text}", file=sys.stderr, flush=True)


def fetch_command(
    models=(),
    *,
    revisions=(),
    revisions_spec: str | None = None,
    corpora=(),
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
) -> str:
    """The ``effdepth fetch`` command line that fills the cache for these inputs.

    >>> fetch_command(["paper16"], corpora=["hf:wiki"])
    'effdepth fetch paper16 --corpus hf:wiki'
    >>> fetch_command(["paper16"], corpora=["hf:HuggingFaceFW/fineweb-edu:sample-10BT:train"])
    'effdepth fetch paper16 --protocol paper'
    >>> fetch_command(["EleutherAI/pythia-1.4b"], revisions_spec="every:10", allow_pickle=True)
    'effdepth fetch EleutherAI/pythia-1.4b --revisions every:10 --allow-pickle'
    """
    import shlex

    parts = ["effdepth", "fetch", *(str(m) for m in models)]
    for r in revisions:
        if r not in (None, "main"):
            parts += ["--revision", r]
    if revisions_spec:
        parts += ["--revisions", revisions_spec]
    from effdepth.data.paper import PAPER_CORPUS

    for c in corpora:
        if c == PAPER_CORPUS:  # its first documents, not the whole dataset
            parts += ["--protocol", "paper"]
        elif isinstance(c, str):
            parts += ["--corpus", c]
    if allow_pickle:
        parts.append("--allow-pickle")
    if trust_remote_code:
        parts.append("--trust-remote-code")
    return shlex.join(parts)


def corpus_needs(corpus) -> list[Need]:
    """The corpus as a :class:`Need` when it comes from the network (Shakespeare, ``hf:``), else nothing.

    >>> [n.what for n in corpus_needs(None)], corpus_needs("notes.txt")
    (["corpus 'shakespeare'"], [])
    """
    if corpus is None or (isinstance(corpus, str) and (corpus == SHAKESPEARE or parse_hf_corpus(corpus) is not None)):
        return [Need("corpus", corpus)]
    return []


def check_measure_inputs(model_id: str | None, revision: str | None, corpus, *, allow_pickle: bool = False) -> None:
    """:func:`check_available` for one measurement: a hub model (or ``None``) and its corpus.

    >>> check_measure_inputs(None, None, ["some text"])
    """
    needs = ([Need("model", model_id, revision, allow_pickle)] if model_id else []) + corpus_needs(corpus)
    if not needs:
        return
    hub_corpus = [corpus] if parse_hf_corpus(corpus) is not None else []
    if model_id:
        fix = fetch_command(
            [model_id], revisions=[revision] if revision else [], corpora=hub_corpus, allow_pickle=allow_pickle
        )
    else:
        fix = fetch_command(corpora=hub_corpus or [SHAKESPEARE])
    check_available(needs, fix=fix)
    if model_id and not is_offline():
        try:
            check_on_hub(model_id, revision, allow_pickle=allow_pickle)
        except _Gone:  # it answered the probe, then went away: as if it never answered
            check_available(needs, fix=fix)


class _Gone(Exception):
    """The hub answered the probe but not the next connection."""


def check_on_hub(repo: str, revision: str | None = None, *, allow_pickle: bool = False, api=None) -> str | None:
    """Online, before anything is downloaded: the hub holds ``repo`` at ``revision``, this machine may read
    it, and it has weights effdepth loads. Returns the commit; raises one line when not.

    One call for the file list (and, for a gated repository, one ``HEAD`` of its config). A fault of
    the hub or the network here (a 5xx, a dropped connection) is left to the download, which
    retries it or falls back on the cache: ``None`` then. A hub that no longer takes connections
    (probed again) raises :class:`_Gone`, for the caller to check the cache as for an unreachable hub.

    >>> import types
    >>> files = [types.SimpleNamespace(rfilename=n) for n in ("config.json", "pytorch_model.bin")]
    >>> api = types.SimpleNamespace(model_info=lambda repo, revision=None: types.SimpleNamespace(sha="c" * 40, gated=False,
    ...                                                                                         siblings=files))
    >>> check_on_hub("o/m", api=api)
    Traceback (most recent call last):
    effdepth.errors.EffdepthError: model o/m has only pickle weights (pytorch_model.bin), which can run arbitrary code when loaded; pass --allow-pickle if you trust its source
    >>> check_on_hub("o/m", api=api, allow_pickle=True) == "c" * 40
    True
    """
    import huggingface_hub

    api = api if api is not None else huggingface_hub.HfApi()
    at = "" if revision in (None, "main") else f" at revision {revision}"
    try:
        with quiet_hub():
            info = api.model_info(repo, revision=revision)
    except Exception as exc:  # noqa: BLE001 - the hub's answer becomes one line; its faults are the download's
        if is_network_error(exc) and hub_answer(exc) is None:
            forget_probe()
            if hub_problem() is not None:
                raise _Gone() from None
        message = None if is_transient(exc) else hub_error_message(exc, repo, revision=revision)
        if message is None:
            return None
        raise EffdepthError(message) from None
    names = [s.rfilename for s in getattr(info, "siblings", None) or []]
    if names and not weight_files(names, allow_pickle=allow_pickle) and pickle_only(names):
        raise EffdepthError(pickle_refusal(f"model {repo}{at}"))
    try:
        check_gated_access(info, repo, revision)
    except Exception as exc:  # noqa: BLE001
        message = None if is_transient(exc) else hub_error_message(exc, repo, revision=revision)
        if message is not None:
            raise EffdepthError(message) from None
    return getattr(info, "sha", None)


def check_gated_access(info, repo: str, revision: str | None) -> None:
    """For a gated repository (its file list is public), whether this machine may download: one ``HEAD``
    of its config, raising what the hub answered. ``info`` is the hub's ``model_info``."""
    names = {s.rfilename for s in getattr(info, "siblings", None) or []}
    if not getattr(info, "gated", False) or "config.json" not in names:
        return
    import huggingface_hub

    with quiet_hub():
        url = huggingface_hub.hf_hub_url(repo, "config.json", revision=getattr(info, "sha", None) or revision)
        huggingface_hub.get_hf_file_metadata(url)
