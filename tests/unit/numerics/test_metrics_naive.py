"""from_states against an independent naive computation written here."""

import numpy as np
import pytest
import torch

import effdepth


def from_states(states, **options):
    """These closed forms and identities are the cosine families': frobenius unless a test says otherwise."""
    options.setdefault("similarity", "frobenius")
    return effdepth.from_states(states, **options)


def naive(states, include_embedding=False, similarity="frobenius"):
    """Straight from docs/method.md, with loops and no shared code."""
    S = np.asarray(states, dtype=np.float64)  # (M, tokens, d)
    M = S.shape[0]
    idx = list(range(M)) if include_embedding else list(range(1, M))
    N = len(idx)
    sim = np.zeros((N, N))
    for a, i in enumerate(idx):
        for b, j in enumerate(idx):
            if similarity == "frobenius":
                sim[a, b] = np.sum(S[i] * S[j]) ** 2 / (np.sum(S[i] ** 2) * np.sum(S[j] ** 2))
            else:
                cs = [(S[i, t] @ S[j, t]) ** 2 / ((S[i, t] @ S[i, t]) * (S[j, t] @ S[j, t])) for t in range(S.shape[1])]
                sim[a, b] = np.mean(cs)
    d = N * N / sim.sum()
    profile = [np.mean([sim[i, i + k] for i in range(N - k)]) for k in range(N)]
    U = [S[l] - S[l - 1] for l in range(1, M)]
    e0 = np.sum(S[0] ** 2)
    eu = np.array([np.sum(u**2) for u in U])

    def R(E):
        return len(E) ** 2 / sum(min(x, y) / max(x, y) for x in E for y in E)

    a = e0 / eu.mean()
    E_init = [a + l for l in range(1, M)]
    E_size = list(np.cumsum(eu))
    E_matched = [e0 + c for c in np.cumsum(eu)]
    if include_embedding:
        E_init = [a] + E_init
        E_size = [eu.mean()] + [eu.mean() + c for c in np.cumsum(eu)]
        E_matched = [e0] + E_matched
    refs = {"init": R(E_init), "size": R(E_size), "matched": R(E_matched)}
    if similarity == "token":

        def token_energies(t):
            e0t = S[0, t] @ S[0, t]
            eut = np.array([U[k][t] @ U[k][t] for k in range(M - 1)])
            at = e0t / eut.mean()
            init = [at + l for l in range(1, M)]
            size = list(np.cumsum(eut))
            matched = [e0t + c for c in np.cumsum(eut)]
            if include_embedding:
                init, size, matched = (
                    [at] + init,
                    [eut.mean()] + [eut.mean() + c for c in np.cumsum(eut)],
                    [e0t] + matched,
                )
            return {"init": init, "size": size, "matched": matched}

        def mean_ratio(name):
            per_token = [token_energies(t)[name] for t in range(S.shape[1])]
            return np.mean([[[min(x, y) / max(x, y) for y in E] for x in E] for E in per_token], axis=0)

        refs = {k: N * N / mean_ratio(k).sum() for k in refs}
    X = ([S[0]] if include_embedding else []) + U
    upd_cos = np.array([[np.sum(a * b) / np.sqrt(np.sum(a**2) * np.sum(b**2)) for b in X] for a in X])
    cos_prev = [
        np.sum(U[l - 1] * S[l - 1]) / np.sqrt(np.sum(U[l - 1] ** 2) * np.sum(S[l - 1] ** 2)) for l in range(1, M)
    ]
    bi = [
        1
        - np.mean(
            [S[l - 1, t] @ S[l, t] / np.linalg.norm(S[l - 1, t]) / np.linalg.norm(S[l, t]) for t in range(S.shape[1])]
        )
        for l in range(1, M)
    ]
    return dict(
        deff=d,
        sim=sim,
        profile=profile,
        refs=refs,
        upd_cos=upd_cos,
        cos_prev=cos_prev,
        block_influence=bi,
        fl=2 * N / (N + 1),
    )


def random_walk(L=6, tokens=7, d=10, seed=0):
    rng = np.random.default_rng(seed)
    s = np.cumsum(rng.standard_normal((L + 1, tokens, d)) * np.linspace(3, 1, L + 1)[:, None, None] + 0.3, axis=0)
    return s


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("similarity", ["frobenius", "token"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_naive(include, similarity, seed):
    s = random_walk(seed=seed)
    ref = naive(s, include, similarity)
    v = from_states(torch.from_numpy(s), include_embedding=include, similarity=similarity).default
    assert v.deff == pytest.approx(ref["deff"], rel=1e-12)
    assert v.reference == pytest.approx(ref["fl"], rel=1e-15)
    np.testing.assert_allclose(v.similarity, ref["sim"], rtol=1e-12)
    np.testing.assert_allclose(v.profile, ref["profile"], rtol=1e-12)
    np.testing.assert_allclose(v.update_cosine, ref["upd_cos"], rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(v.update_state_cosine, ref["cos_prev"], rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(v.related["block_influence"], ref["block_influence"], rtol=1e-10, atol=1e-13)
    for k in ("init", "size", "matched"):
        assert v.references[k] == pytest.approx(ref["refs"][k], rel=1e-12)
    assert v.deff == pytest.approx(v.reference - sum(v.attribution.values()), rel=1e-12)


def test_profile_form_equals_matrix_form():
    from effdepth.numerics.similarity import deff, deff_from_profile

    v = from_states(torch.from_numpy(random_walk())).default
    assert float(deff_from_profile(np.array(v.profile))) == pytest.approx(
        float(deff(np.array(v.similarity))), rel=1e-12
    )


def test_update_energy_uses_explicit_differences():
    # Nearly parallel huge states with tiny updates: expanding |S_l - S_{l-1}|^2
    # from the state Gram matrix would lose every digit.
    rng = np.random.default_rng(0)
    base = rng.standard_normal((5, 64)) * 1e8
    L = 4
    ups = rng.standard_normal((L, 5, 64)) * 1e-2
    s = np.concatenate([base[None], base[None] + np.cumsum(ups, axis=0)])
    v = from_states(torch.from_numpy(s)).default
    expected = (ups**2).sum(axis=(1, 2))
    np.testing.assert_allclose(v.update_energy, expected, rtol=1e-6)


def test_batch_units_and_mask():
    # Padding positions carry garbage and must not enter any statistic.
    s = random_walk(L=4, tokens=12, d=8)
    batch = np.stack([s[:, :6], s[:, 6:]], axis=1)  # (M, 2, 6, d)
    padded = np.concatenate([batch, np.full((5, 2, 3, 8), 1e30)], axis=2)
    mask = np.concatenate([np.ones((2, 6)), np.zeros((2, 3))], axis=1)
    a = from_states(torch.from_numpy(batch)).default
    b = from_states(torch.from_numpy(padded), mask=torch.from_numpy(mask)).default
    whole = from_states(torch.from_numpy(s)).default
    assert a.deff == pytest.approx(b.deff, rel=1e-12)
    assert a.deff == pytest.approx(whole.deff, rel=1e-12)
    assert a.sequences == 2 and whole.sequences == 1
