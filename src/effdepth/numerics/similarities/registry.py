"""Every similarity of both modes, looked up and parsed by mode.

:data:`REGISTRY` holds each mode's specs in order (the order reports list
them in). ``--similarity`` is read by :func:`parse_similarities` alone, for
either mode; a name of the other mode is refused with the mode it belongs to.
The registry checks its specs when it is built, so a spec that could not work
fails at import.
"""

from __future__ import annotations

from ...errors import EffdepthError
from ..hsic_resample import ESTIMATORS
from . import passage, token
from .spec import PASSAGE, POOLING, TOKEN, UNITS, Similarity

#: Token mode's specs by name (the default mode of these functions).
SIMILARITIES = {s.name: s for s in token.SPECS}
#: Passage mode's specs by name.
PASSAGE_SIMILARITIES = {s.name: s for s in passage.SPECS}
REGISTRY = {TOKEN: SIMILARITIES, PASSAGE: PASSAGE_SIMILARITIES}
NAMES = tuple(SIMILARITIES)


def _registry(mode: str) -> dict:
    try:
        return REGISTRY[mode]
    except (KeyError, TypeError):
        raise EffdepthError(f"unknown mode {mode!r}; choose from {', '.join(REGISTRY)}") from None


def specs(mode: str) -> tuple:
    """A mode's specs, in registry order.

    >>> [s.name for s in specs("passage")]
    ['cka', 'cka-debiased', 'cosine']
    """
    return tuple(_registry(mode).values())


def names(mode: str) -> tuple:
    """A mode's similarity names, in registry order.

    >>> names("token")
    ('frobenius', 'token', 'cka', 'cka-full')
    """
    return tuple(_registry(mode))


def find_similarity(name, mode: str = TOKEN) -> Similarity | None:
    """The spec of ``name`` in ``mode``, or None.

    >>> find_similarity("cosine", "passage").references, find_similarity("cosine", "token")
    (False, None)
    """
    try:
        return _registry(mode).get(name)
    except TypeError:  # an unhashable name is no similarity
        return None


def get_similarity(name, mode: str = TOKEN) -> Similarity:
    """The spec of ``name`` in ``mode``; a one-line error for an unknown one.

    >>> get_similarity("token").reference_matrices
    True
    >>> get_similarity("cosine")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: unknown similarity 'cosine'; choose from frobenius, token, cka, cka-full (cosine is passage mode's: --pooling mean)
    """
    spec = find_similarity(name, mode)
    if spec is None:
        other = _other_mode(name, mode)
        belongs = f" ({name} is {other} mode's: --pooling {POOLING[other]})" if other else ""
        raise EffdepthError(f"unknown similarity {name!r}; choose from {', '.join(names(mode))}{belongs}")
    return spec


def default_similarity(mode: str) -> str:
    """The similarity a mode measures unless told otherwise.

    >>> default_similarity("token"), default_similarity("passage")
    ('cka', 'cka')
    """
    return next(s.name for s in specs(mode) if s.default)


def all_similarities(mode: str) -> tuple:
    """What ``--similarity all`` means in a mode: the default first, then the others it names.

    >>> all_similarities("token"), all_similarities("passage")
    (('cka', 'frobenius', 'token'), ('cka', 'cka-debiased', 'cosine'))
    """
    first = default_similarity(mode)
    return (first,) + tuple(s.name for s in specs(mode) if s.in_all and s.name != first)


def parse_similarities(value, mode: str) -> tuple:
    """``--similarity`` in ``mode``: one name, a comma list, ``all`` or a sequence (empty: the mode's
    default) -> the similarities without repeats, the primary first, each followed by its companions.

    >>> parse_similarities("token,cka", "token"), parse_similarities("cka", "passage")
    (('token', 'cka'), ('cka', 'cka-debiased'))
    >>> parse_similarities("frobenius", "passage")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --similarity 'frobenius' is token mode's (--pooling none): passage mode measures cka, cka-debiased, cosine, a comma list of them, or all
    """
    value = value or (default_similarity(mode),)
    out: list = []
    for raw in value.split(",") if isinstance(value, str) else list(value):
        name = str(raw).strip()
        for n in all_similarities(mode) if name == "all" else (name,):
            spec = find_similarity(n, mode)
            if spec is None:
                raise EffdepthError(_unknown(n, mode))
            out += [m for m in (n, *spec.companions) if m not in out]
    return tuple(out)


def validate_similarities(similarities) -> tuple:
    """Token-mode similarities as :func:`parse_similarities` reads them; none at all stays none (the
    additive statistics alone).

    >>> validate_similarities("cka,frobenius"), validate_similarities(())
    (('cka', 'frobenius'), ())
    """
    if not similarities and not isinstance(similarities, str):
        return ()
    return parse_similarities(similarities, TOKEN)


def fewest_samples(mode: str) -> Similarity:
    """The spec that needs the most samples in a mode: every run of the mode has at least its
    ``min_samples``, so stored pooled vectors can be analysed again under any similarity.

    >>> s = fewest_samples("passage"); s.name, s.min_samples
    ('cka-debiased', 4)
    """
    return max(specs(mode), key=lambda s: s.min_samples)


def names_where(predicate, mode: str = TOKEN) -> tuple:
    """The names of a mode's similarities a predicate on the spec holds for, in registry order.

    >>> names_where(lambda s: s.additive)
    ('frobenius', 'token')
    """
    return tuple(s.name for s in specs(mode) if predicate(s))


#: Token-mode similarities with statistics of their own (the additive ones are kept for every run).
KERNEL_SIMILARITIES = names_where(lambda s: not s.additive)
#: Token-mode similarities read from the additive statistics of every stream they measure.
COSINE_SIMILARITIES = names_where(lambda s: s.additive)


def keeps_cosine_sums(similarities) -> bool:
    """Whether every stream keeps the additive (cosine) sums under ``similarities``: a cosine
    similarity (:data:`COSINE_SIMILARITIES`) among them, or none at all (the additive
    statistics alone are asked for).

    >>> keeps_cosine_sums(("cka",)), keeps_cosine_sums(("cka", "token")), keeps_cosine_sums(())
    (False, True, True)
    """
    return not similarities or any(s in COSINE_SIMILARITIES for s in similarities)


def _other_mode(name, mode: str) -> str | None:
    return next((m for m in REGISTRY if m != mode and find_similarity(name, m) is not None), None)


def _unknown(name: str, mode: str) -> str:
    """The one-line error for ``--similarity name`` in ``mode``, naming the mode it belongs to."""
    other = _other_mode(name, mode)
    listed = ", ".join(names(mode))
    if mode == PASSAGE:
        belongs = f" is {other} mode's (--pooling {POOLING[other]})" if other else ""
        return f"--similarity {name!r}{belongs}: passage mode measures {listed}, a comma list of them, or all"
    belongs = f", which is {other} mode's (--pooling {POOLING[other]})" if other else ""
    return f"--similarity must be one of {listed}, a comma list of them, or all; got {name!r}{belongs}"


def _check(mode: str, spec: Similarity) -> None:
    """Refuse a spec the rest of the package could not use (at import, not mid-run)."""
    problems = [
        spec.mode != mode and f"a {spec.mode}-mode spec",
        spec.unit not in UNITS[mode] and f"unit {spec.unit!r} is not one of {', '.join(UNITS[mode])}",
        spec.min_samples < 1 and "min_samples must be at least 1",
        spec.min_samples > 1 and not spec.min_reason and "a minimum above 1 needs its min_reason",
        any(c not in REGISTRY[mode] for c in spec.companions) and "a companion is not of its mode",
    ]
    if mode == PASSAGE:
        problems += [
            (spec.estimator is None) == (spec.matrix is None) and "give either estimator or matrix",
            spec.estimator is not None
            and spec.estimator not in ESTIMATORS
            and f"estimator must be one of {', '.join(ESTIMATORS)}",
            spec.references and not spec.kernel and "matched references come from an HSIC estimator",
        ]
    found = [p for p in problems if p]
    if found:
        raise EffdepthError(f"similarity {spec.name!r} ({mode} mode): {'; '.join(found)}")


def _check_registry() -> None:
    for mode, registered in REGISTRY.items():
        for spec in registered.values():
            _check(mode, spec)
        if sum(s.default for s in registered.values()) != 1:
            raise EffdepthError(f"{mode} mode needs exactly one default similarity")


_check_registry()
