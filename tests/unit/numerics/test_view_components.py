"""The view-component registry (numerics/view_components.py): every component parses in its modes,
composes with '+' in slot order, and is refused with one line elsewhere; what each does agrees
with a naive computation."""

import numpy as np
import pytest
import torch

import effdepth
from effdepth.errors import EffdepthError
from effdepth.numerics import passage_views, views
from effdepth.numerics.fits import FitAccumulator
from effdepth.numerics.pooling import PassagePooler
from effdepth.numerics.view_components import COMPONENTS, MODES, SLOTS, Step, parse_steps

PARSERS = {"token": views.parse_view, "passage": passage_views.parse_view}


def written(component, k=2):
    """A text standing for the component (k for a family)."""
    return Step(component, k if "{k}" in component.name else None).text


IN_MODE = [(c, mode) for c in COMPONENTS for mode in c.modes]
ELSEWHERE = [(c, mode) for c in COMPONENTS for mode in MODES if mode not in c.modes]
PAIRS = [(a, b, mode) for a, mode in IN_MODE for b in COMPONENTS if mode in b.modes and b.slot != a.slot]


def one_line_error(call) -> str:
    with pytest.raises(EffdepthError) as caught:
        call()
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize("component, mode", IN_MODE, ids=lambda x: getattr(x, "name", x))
def test_every_component_parses_alone_in_its_modes(component, mode):
    view = PARSERS[mode](written(component))
    assert [s.component for s in view.steps] == [component]
    assert [s.text for s in view.steps] == [written(component)]


@pytest.mark.parametrize("a, b, mode", PAIRS, ids=lambda x: getattr(x, "name", x))
def test_components_compose_in_slot_order_whatever_order_they_are_written_in(a, b, mode):
    one, other = (PARSERS[mode](f"{written(x)}+{written(y)}") for x, y in ((a, b), (b, a)))
    assert one.steps == other.steps
    assert [SLOTS.index(s.component.slot) for s in one.steps] == sorted(SLOTS.index(c.slot) for c in (a, b))


@pytest.mark.parametrize("component, mode", ELSEWHERE, ids=lambda x: getattr(x, "name", x))
def test_a_component_is_refused_in_a_mode_it_does_not_exist_in(component, mode):
    message = one_line_error(lambda: PARSERS[mode](written(component)))
    assert f"not a {mode}-mode view" in message and f"{component.modes[0]} mode's" in message


@pytest.mark.parametrize("mode", MODES)
def test_two_components_of_one_slot_unknown_ones_and_k_below_one_are_refused(mode):
    same_slot = [
        (a, b)
        for a in COMPONENTS
        for b in COMPONENTS
        if a.name < b.name and a.slot == b.slot and mode in a.modes and mode in b.modes
    ]
    for a, b in same_slot + [(c, c) for c in COMPONENTS if mode in c.modes]:
        assert "has two" in one_line_error(lambda a=a, b=b: PARSERS[mode](f"{written(a)}+{written(b, 3)}"))
    assert "unknown view component 'bogus'" in one_line_error(lambda: PARSERS[mode]("token-norm+bogus"))
    assert "needs k >= 1" in one_line_error(lambda: PARSERS[mode]("top0pc"))
    assert "empty view name" in one_line_error(lambda: PARSERS[mode](" "))


def test_default_is_no_component_in_either_mode():
    for mode in MODES:
        assert parse_steps("default", mode) == ()
    assert views.parse_view("default").canonical == passage_views.parse_view("default").name == "default"


# -- what the components do ------------------------------------------------------------


def naive_token_view(view: str, s: np.ndarray) -> np.ndarray:
    """A token-mode view of one sequence's states (M, T, d), by hand, with the fit on that sequence."""
    if "drop-pos0" in view:
        s = s[:, 1:]
    if "pos0-only" in view:
        s = s[:, :1]
    if "token-norm" in view:
        s = s / np.linalg.norm(s, axis=-1, keepdims=True)
    mean = s.mean(1, keepdims=True)
    if "center" in view:
        s = s - mean
    if "top1pc" in view:
        c = s - s.mean(1, keepdims=True)
        vectors = np.stack([np.linalg.eigh(layer.T @ layer)[1][:, -1:] for layer in c])
        s = s - s @ vectors @ vectors.transpose(0, 2, 1)
    return s


@pytest.mark.parametrize(
    "view",
    [
        "default",
        "drop-pos0",
        "pos0-only",
        "token-norm",
        "center",
        "top1pc",
        "center+token-norm+drop-pos0",
        "top1pc+token-norm",
    ],
)
def test_the_token_transform_is_the_views_steps_in_order(view):
    s = torch.randn(3, 9, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).cumsum(0) + 1.0
    spec = views.parse_view(view)
    acc = FitAccumulator(views=[spec])
    acc.update(spec.before_fit(spec.select(s)))
    got = spec.view_states(s, acc.compute()[spec.canonical] if spec.needs_fit else None).numpy()
    want = naive_token_view(view, s.numpy())
    if "top1pc" in view:  # the removed direction's sign is arbitrary: compare what is left
        np.testing.assert_allclose(got, want, atol=1e-10)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("similarity", ["cka", "cka-full"])
def test_a_step_that_centring_removes_is_skipped_by_the_centring_similarities(similarity):
    # center only shifts every token of a layer alike: under cka it gives default's numbers exactly
    # (float32 states far from the origin, where subtracting a mean twice would round otherwise).
    s = torch.randn(4, 6, 8, 5, generator=torch.Generator().manual_seed(1)).cumsum(0) + 1e3
    r = effdepth.from_states(
        s, views=["default", "center", "token-norm", "token-norm+center"], similarity=similarity, pc_estimate="exact"
    ).views
    assert r["center"].deff == r["default"].deff
    assert r["token-norm+center"].deff == r["token-norm"].deff
    frobenius = effdepth.from_states(s, views=["default", "center"], similarity="frobenius", pc_estimate="exact").views
    assert frobenius["center"].deff != frobenius["default"].deff


def test_every_passage_variant_pools_as_its_components_say():
    g = torch.Generator().manual_seed(2)
    b, t, d = 5, 6, 3
    mask = torch.ones(b, t)
    mask[1, 4:] = 0
    mask[3, :2] = 0  # left padding
    first_is_bos = torch.tensor([True, False, True, True, False])
    x = torch.randn(2, b, t, d, generator=g, dtype=torch.float64)
    pooler = PassagePooler(passage_views.VARIANTS, num_layers=1)
    pooler.start(mask, first_is_bos)
    for layer in range(2):
        pooler.layer(layer, x[layer])
    for i, variant in enumerate(passage_views.VARIANTS):
        for p in range(b):
            kept = [j for j in range(t) if mask[p, j]]
            if ("drop-bos" in variant and first_is_bos[p]) or "drop-pos0" in variant:
                kept = kept[1:]
            tokens = x[:, p, kept].numpy()
            if "token-norm" in variant:
                tokens = tokens / np.linalg.norm(tokens, axis=-1, keepdims=True)
            np.testing.assert_allclose(pooler.pooled[i, :, p].numpy(), tokens.mean(1), rtol=1e-12)


def test_passage_views_differ_after_pooling_by_their_pooled_stage_alone():
    a, b = passage_views.parse_view("token-norm+top2pc"), passage_views.parse_view("token-norm")
    assert a.variant == b.variant == "token-norm"
    assert [s.text for s in a.pooled_stage] == ["top2pc"] and b.pooled_stage == ()
    assert passage_views.VARIANTS == (
        "default",
        "drop-pos0",
        "drop-bos",
        "token-norm",
        "drop-pos0+token-norm",
        "drop-bos+token-norm",
    )
