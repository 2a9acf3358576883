"""Branch and folder names -> training step and tokens, on the names found in the wild."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effdepth.errors import EffdepthError
from effdepth.scale.revisions import (
    PYTHIA_TOKENS_PER_STEP,
    check_revision,
    log_spaced_picks,
    parse_revision,
    parse_revisions,
    parse_selection,
    select_every,
    select_log,
    tokens_per_step_for,
)

# Pythia's branches: log-spaced early steps, then every 1000 steps, and main.
PYTHIA = ["main", "step0"] + [f"step{2**i}" for i in range(10)] + [f"step{k * 1000}" for k in range(1, 144)]

OLMO2 = [
    "main",
    "stage1-step1000-tokens5B",
    "stage1-step928646-tokens3896B",
    "stage1-step10000-tokens42B",
    "stage2-ingredient1-step11931-tokens50B",
    "stage2-ingredient1-step1000-tokens5B",
    "stage2-ingredient2-step11931-tokens50B",
    "stage2-ingredient3-step11931-tokens50B",
    "step1000-tokens4B",  # unprefixed (OLMo-2 1B)
    "v1.0",
    "stage1-step100",  # no tokens: not a name we know
]


def test_pythia_branches():
    cps, skipped = parse_revisions(PYTHIA, tokens_per_step=tokens_per_step_for("EleutherAI/pythia-70m"))
    assert skipped == []
    assert len(cps) == len(PYTHIA)
    steps = [c.step for c in cps if not c.final]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 143000
    last = cps[-2]
    assert last.revision == "step143000" and last.tokens == 143000 * 2_097_152 == last.tokens_seen
    assert cps[-1].revision == "main" and cps[-1].final and cps[-1].step is None
    assert cps[0].tokens == 0


def test_olmo2_branches():
    cps, skipped = parse_revisions(OLMO2)
    assert skipped == ["v1.0", "stage1-step100"]
    by = {c.revision: c for c in cps}
    assert by["stage1-step928646-tokens3896B"].tokens == 3_896_000_000_000
    assert by["step1000-tokens4B"].track == "main" and by["step1000-tokens4B"].tokens == 4_000_000_000
    ing = by["stage2-ingredient1-step11931-tokens50B"]
    assert ing.track == "stage2-ingredient1" and ing.step == 11931 and ing.tokens == 50_000_000_000
    # Stage 2 restarts its counts: plotted after the most tokens stage 1 reached.
    assert ing.tokens_seen == 3_896_000_000_000 + 50_000_000_000
    order = [c.revision for c in cps]
    assert order.index("stage1-step928646-tokens3896B") < order.index("stage2-ingredient1-step1000-tokens5B")
    assert order.index("stage2-ingredient1-step1000-tokens5B") < order.index("stage2-ingredient1-step11931-tokens50B")
    assert order[-1] == "main"


@pytest.mark.parametrize(
    "name, step",
    [("step-100", 100), ("step100", 100), ("step_100", 100), ("checkpoint-100", 100), ("checkpoint100", 100)],
)
def test_local_folder_names(name, step):
    c = parse_revision(name, tokens_per_step=10)
    assert c.step == step and c.tokens == step * 10


@pytest.mark.parametrize("name", ["final", "v1.0", "step", "step-x", "stage1-step1-tokensB", "mainline", "refs/pr/1"])
def test_other_names_are_not_checkpoints(name):
    assert parse_revision(name) is None


def test_steps_without_tokens_per_step_have_no_tokens():
    assert parse_revision("step1000").tokens is None
    assert tokens_per_step_for("allenai/OLMo-2-1124-7B") is None
    assert tokens_per_step_for("EleutherAI/pythia-12b-deduped") == PYTHIA_TOKENS_PER_STEP


def test_every_k_keeps_the_last_and_main():
    cps, _ = parse_revisions(PYTHIA)
    kept = select_every(cps, 50)
    assert kept[0].step == 0 and kept[-2].step == 143000 and kept[-1].final
    assert len(kept) == len(range(0, len(cps) - 1, 50)) + 2
    with pytest.raises(EffdepthError):
        select_every(cps, 0)


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=30, unique=True), st.integers(1, 7))
def test_every_k_property(steps, k):
    cps, _ = parse_revisions([f"step{s}" for s in steps])
    kept = [c.step for c in select_every(cps, k)]
    ordered = sorted(steps)
    assert kept[-1] == ordered[-1] and kept[0] == ordered[0]
    assert set(ordered[::k]) <= set(kept) and len(kept) <= len(ordered[::k]) + 1


def test_log_k_on_pythia_plans_35_and_finds_25_distinct_checkpoints():
    """The paper's Figure 3 plots 25 of 35 planned Pythia checkpoints: log spacing over Pythia's branches gives exactly that."""
    cps, _ = parse_revisions(PYTHIA, tokens_per_step=PYTHIA_TOKENS_PER_STEP)
    kept, planned = select_log(cps, 35)
    steps = [c.step for c in kept if not c.final]
    assert planned == 35 and len(steps) == 25 and kept[-1].final
    assert steps[0] == 0 and steps[-1] == 143000 and steps == sorted(set(steps))
    assert steps[:11] == [0] + [2**i for i in range(10)]  # the dense early branches, one each
    # Spaced in log: consecutive later picks grow by a roughly constant factor (143000^(1/33) ~ 1.43).
    late = [s for s in steps if s >= 4000]
    assert all(1.2 < b / a < 1.8 for a, b in zip(late, late[1:]))


def test_log_k_spaces_the_first_track_only_and_keeps_its_ends():
    names = [f"stage1-step{s}-tokens{s // 1000}B" for s in (1000, 2000, 5000, 10000, 50000, 100000, 400000, 900000)]
    names += ["stage2-ingredient1-step500-tokens3B", "stage2-ingredient2-step500-tokens3B", "main"]
    cps, _ = parse_revisions(names)
    kept, planned = select_log(cps, 4)
    assert [c.revision for c in kept] == [
        "stage1-step1000-tokens1B",
        "stage1-step10000-tokens10B",
        "stage1-step100000-tokens100B",
        "stage1-step900000-tokens900B",
        "main",
    ]
    assert planned == 4
    kept, planned = select_log(cps, 20)  # more asked than exist: every checkpoint of the track, once
    assert len(kept) == 9 and planned == 8 and all(c.track == "stage1" for c in kept[:-1])


def test_log_k_uses_steps_when_tokens_are_unknown():
    cps, _ = parse_revisions([f"step-{s}" for s in (10, 20, 40, 80, 160, 320, 640)])
    assert [c.step for c in select_log(cps, 3)[0]] == [10, 80, 640]


@given(st.lists(st.integers(0, 10**9), min_size=2, max_size=40, unique=True), st.integers(2, 12))
def test_log_spaced_picks_property(positions, k):
    positions = sorted(positions)
    picks = log_spaced_picks(positions, k)
    assert picks[0] == 0 and picks[-1] == len(positions) - 1
    assert len(picks) == len(set(picks)) <= k and picks == sorted(picks)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("auto", ("auto", None)),
        ("every:10", ("every", 10)),
        ("log:35", ("log", 35)),
        ("step0, step1000,main", ("list", ["step0", "step1000", "main"])),
    ],
)
def test_selection(text, expected):
    assert parse_selection(text) == expected


@pytest.mark.parametrize(
    "text", ["every:0", "every:x", "every:", "log:0", "log:1", "log:x", "log:", ",", "../step1", "step1,/abs"]
)
def test_bad_selection(text):
    with pytest.raises(EffdepthError):
        parse_selection(text)


@pytest.mark.parametrize("rev", ["../x", "/abs", "a//b", "a/../b", "a b", "", ".", "x/", "-rf"])
def test_path_like_revisions_are_refused(rev):
    with pytest.raises(EffdepthError, match="malformed revision"):
        check_revision(rev)


def test_ordinary_revisions_pass():
    for rev in ("main", "step143000", "stage2-ingredient1-step11931-tokens50B", "v1.0", "refs/pr/1", "a" * 40):
        assert check_revision(rev) == rev
