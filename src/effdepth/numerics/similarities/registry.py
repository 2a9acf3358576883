"""Every similarity, looked up and parsed.

The specs are checked when the registry is built: a spec that could not work fails at import.
"""

from __future__ import annotations

from dataclasses import replace

from effdepth.errors import EffdepthError
from effdepth.numerics.hsic_plan import ESTIMATORS
from effdepth.numerics.similarities import builtin
from effdepth.numerics.similarities.spec import Similarity


def _registered(given: tuple) -> dict:
    """The specs by name, each told which spec brings it as a companion."""
    brought_by = {c: s.name for s in given for c in s.companions}
    return {s.name: replace(s, companion_of=brought_by.get(s.name)) for s in given}


#: The specs by name, in registry order.
SIMILARITIES = _registered(builtin.SPECS)
#: Similarities of the token-level statistics that the token reduction (``--pooling none``) replaced.
REMOVED = ("frobenius", "token", "cka-full")


def specs() -> tuple:
    """The specs, in registry order.

    >>> [s.name for s in specs()]
    ['cka', 'cka-debiased', 'cosine']
    """
    return tuple(SIMILARITIES.values())


def names() -> tuple:
    """The similarity names, in registry order."""
    return tuple(SIMILARITIES)


def find_similarity(name) -> Similarity | None:
    """The spec of ``name``, or None.

    >>> find_similarity("cosine").references, find_similarity("frobenius")
    (False, None)
    """
    try:
        return SIMILARITIES.get(name)
    except TypeError:  # an unhashable name is no similarity
        return None


def get_similarity(name) -> Similarity:
    """The spec of ``name``; a one-line error for an unknown one.

    >>> get_similarity("cka").kernel
    True
    """
    spec = find_similarity(name)
    if spec is None:
        raise EffdepthError(_unknown(name))
    return spec


def default_similarity() -> str:
    """The similarity measured unless told otherwise.

    >>> default_similarity()
    'cka'
    """
    return next(s.name for s in specs() if s.default)


def all_similarities() -> tuple:
    """What ``--similarity all`` means: the default first, then the others it names.

    >>> all_similarities()
    ('cka', 'cka-debiased', 'cosine')
    """
    first = default_similarity()
    return (first,) + tuple(s.name for s in specs() if s.in_all and s.name != first)


def parse_similarities(value) -> tuple:
    """``--similarity``: one name, a comma list, ``all`` or a sequence (empty: the default) -> the
    similarities without repeats, the primary first, each followed by its companions.

    >>> parse_similarities("cosine,cka"), parse_similarities(None)
    (('cosine', 'cka', 'cka-debiased'), ('cka', 'cka-debiased'))
    >>> parse_similarities("frobenius")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --similarity 'frobenius' is gone with the old token-level statistics: every similarity is now computed across samples, and --pooling none takes each passage's tokens as the samples; choose cka, cka-debiased, cosine, a comma list of them, or all
    """
    value = value or (default_similarity(),)
    out: list = []
    for raw in value.split(",") if isinstance(value, str) else list(value):
        name = str(raw).strip()
        for n in all_similarities() if name == "all" else (name,):
            spec = find_similarity(n)
            if spec is None:
                raise EffdepthError(_unknown(n))
            out += [m for m in (n, *spec.companions) if m not in out]
    return tuple(out)


def fewest_samples() -> Similarity:
    """The spec that needs the most samples: every run has at least its ``min_samples``, so stored
    samples can be analysed again under any similarity.

    >>> s = fewest_samples(); s.name, s.min_samples
    ('cka-debiased', 4)
    """
    return max(specs(), key=lambda s: s.min_samples)


def names_where(predicate) -> tuple:
    """The names of the similarities a predicate on the spec holds for, in registry order.

    >>> names_where(lambda s: s.kernel)
    ('cka', 'cka-debiased')
    """
    return tuple(s.name for s in specs() if predicate(s))


def similarity_choices() -> str:
    """The similarities as ``--similarity``'s help lists them: the default and companions said.

    >>> similarity_choices()
    'cka (default, always with cka-debiased beside it), cka-debiased, cosine'
    """

    def choice(spec) -> str:
        notes = (["default"] if spec.default else []) + [f"always with {c} beside it" for c in spec.companions]
        return f"{spec.name} ({', '.join(notes)})" if notes else spec.name

    return ", ".join(choice(spec) for spec in specs())


def _unknown(name) -> str:
    listed = ", ".join(names())
    if name in REMOVED:
        return (
            f"--similarity {name!r} is gone with the old token-level statistics: every similarity is now "
            "computed across samples, and --pooling none takes each passage's tokens as the samples; "
            f"choose {listed}, a comma list of them, or all"
        )
    return f"--similarity must be one of {listed}, a comma list of them, or all; got {name!r}"


def _check(spec: Similarity) -> None:
    """Refuse a spec the rest of the package could not use (at import, not mid-run)."""
    problems = [
        spec.min_samples < 1 and "min_samples must be at least 1",
        spec.min_samples > 1 and not spec.min_reason and "a minimum above 1 needs its min_reason",
        any(c not in SIMILARITIES for c in spec.companions) and "a companion is not registered",
        (spec.estimator is None) == (spec.matrix is None) and "give either estimator or matrix",
        spec.estimator is not None
        and spec.estimator not in ESTIMATORS
        and f"estimator must be one of {', '.join(ESTIMATORS)}",
        spec.references and not spec.kernel and "matched references come from an HSIC estimator",
    ]
    found = [p for p in problems if p]
    if found:
        raise EffdepthError(f"similarity {spec.name!r}: {'; '.join(found)}")


def _check_registry() -> None:
    for spec in SIMILARITIES.values():
        _check(spec)
    if sum(s.default for s in SIMILARITIES.values()) != 1:
        raise EffdepthError("the registry needs exactly one default similarity")


_check_registry()
