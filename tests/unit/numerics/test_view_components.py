"""The view-component registry (numerics/view_components.py): every component parses, composes with '+' in
slot order, the views of the old token-level statistics are refused in one line; what each does agrees with a
naive computation."""

import numpy as np
import pytest
import torch

from effdepth.errors import EffdepthError
from effdepth.numerics import views as numerics_views
from effdepth.numerics.pooling import PassagePooler
from effdepth.numerics.view_components import COMPONENTS, REMOVED, SLOTS, Step, parse_steps

parse_view = numerics_views.parse_view


def written(component, k=2):
    """A text standing for the component (k for a family)."""
    return Step(component, k if "{k}" in component.name else None).text


PAIRS = [(a, b) for a in COMPONENTS for b in COMPONENTS if b.slot != a.slot]


def one_line_error(call) -> str:
    with pytest.raises(EffdepthError) as caught:
        call()
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda x: x.name)
def test_every_component_parses_alone(component):
    view = parse_view(written(component))
    assert [s.component for s in view.steps] == [component]
    assert [s.text for s in view.steps] == [written(component)]


@pytest.mark.parametrize("a, b", PAIRS, ids=lambda x: x.name)
def test_components_compose_in_slot_order_whatever_order_they_are_written_in(a, b):
    one, other = (parse_view(f"{written(x)}+{written(y)}") for x, y in ((a, b), (b, a)))
    assert one.steps == other.steps
    assert [SLOTS.index(s.component.slot) for s in one.steps] == sorted(SLOTS.index(c.slot) for c in (a, b))


@pytest.mark.parametrize("removed", ["pos0-only", "center", "top2pc-shared", "drop-pos0+center"])
def test_a_view_of_the_old_token_statistics_is_refused_saying_what_to_use(removed):
    message = one_line_error(lambda: parse_view(removed))
    assert "is gone with the old token-level statistics" in message
    assert any(instead in message for instead in REMOVED.values())


def test_two_components_of_one_slot_unknown_ones_and_k_below_one_are_refused():
    same_slot = [(a, b) for a in COMPONENTS for b in COMPONENTS if a.name < b.name and a.slot == b.slot]
    for a, b in same_slot + [(c, c) for c in COMPONENTS]:
        assert "has two" in one_line_error(lambda a=a, b=b: parse_view(f"{written(a)}+{written(b, 3)}"))
    assert "unknown view component 'bogus'" in one_line_error(lambda: parse_view("token-norm+bogus"))
    assert "needs k >= 1" in one_line_error(lambda: parse_view("top0pc"))
    assert "empty view name" in one_line_error(lambda: parse_view(" "))


def test_default_is_no_component():
    assert parse_steps("default") == ()
    assert parse_view("default").name == "default"


# -- what the components do ------------------------------------------------------------


def test_every_passage_variant_pools_as_its_components_say():
    g = torch.Generator().manual_seed(2)
    b, t, d = 5, 6, 3
    mask = torch.ones(b, t)
    mask[1, 4:] = 0
    mask[3, :2] = 0  # left padding
    first_is_bos = torch.tensor([True, False, True, True, False])
    x = torch.randn(2, b, t, d, generator=g, dtype=torch.float64)
    pooler = PassagePooler(numerics_views.VARIANTS, num_layers=1)
    pooler.start(mask, first_is_bos)
    for layer in range(2):
        pooler.layer(layer, x[layer])
    for i, variant in enumerate(numerics_views.VARIANTS):
        for p in range(b):
            kept = [j for j in range(t) if mask[p, j]]
            if ("drop-bos" in variant and first_is_bos[p]) or "drop-pos0" in variant:
                kept = kept[1:]
            tokens = x[:, p, kept].numpy()
            if "token-norm" in variant:
                tokens = tokens / np.linalg.norm(tokens, axis=-1, keepdims=True)
            np.testing.assert_allclose(pooler.pooled[i, :, p].numpy(), tokens.mean(1), rtol=1e-12)


def test_passage_views_differ_after_pooling_by_their_pooled_stage_alone():
    a, b = numerics_views.parse_view("token-norm+top2pc"), numerics_views.parse_view("token-norm")
    assert a.variant == b.variant == "token-norm"
    assert [s.text for s in a.pooled_stage] == ["top2pc"] and b.pooled_stage == ()
    assert numerics_views.VARIANTS == (
        "default",
        "drop-pos0",
        "drop-bos",
        "token-norm",
        "drop-pos0+token-norm",
        "drop-bos+token-norm",
    )
