"""TransformerLens models measured through their own hook points.

Offline construction (no model hub):

- ``TransformerBridge.boot_transformers(name, hf_model=m, tokenizer=tok)``
  copies ``m.config`` instead of downloading one (``name`` is only a label).
  TransformerLens reloads the tokenizer by its ``name_or_path`` with
  ``add_bos_token=True``, so ``tok`` must come from a folder
  (``AutoTokenizer.from_pretrained(folder)``), not be built in memory.
  The bridge rewires ``m`` in place (its blocks become BlockBridges, its
  attention eager), so the Hugging Face reference is a second copy.
- ``HookedTransformer`` (TransformerLens < 4 only): ``from_pretrained*``
  refuses any name outside TransformerLens' official list before looking at
  ``hf_model``; what ``from_pretrained_no_processing`` does is spelled out
  instead: ``get_pretrained_model_config(folder)`` (a local folder is read,
  not fetched), ``HookedTransformer(cfg, tok)``,
  ``get_pretrained_state_dict(folder, cfg, hf_model)`` and
  ``load_and_process_state_dict`` with every processing flag off (or on, for
  ``from_pretrained``'s defaults). Its GPT-2 converter reads ``config.n_ctx``,
  which transformers 5 no longer writes, so the folder's config gets it.
"""

import pytest
import torch

import effdepth
from effdepth.data import byte_tokenizer
from effdepth.errors import EffdepthError
from effdepth.models.tiny import TINY_LAYERS, tiny_model

FAMILIES = ("gpt2", "llama")
TOL = 1e-5
VIEWS = ("default", "drop-pos0", "token-norm")


@pytest.fixture(scope="module", autouse=True)
def transformer_lens():
    # Imported when these tests run, not at collection (it patches huggingface_hub's validator on import).
    return pytest.importorskip("transformer_lens")


def token_ids(rows=6, cols=12, seed=0):
    return torch.randint(0, 256, (rows, cols), generator=torch.Generator().manual_seed(seed))


def measured(model, corpus, **options):
    options = {"bootstrap": 0, "batch_size": 3, "progress": False, "views": VIEWS, **options}
    return effdepth.measure(model, corpus, **options, pooling="none")


def assert_close_results(a, b, tol=TOL):
    for name, va in a.views.items():
        vb = b.views[name]
        assert (va.sequences, va.tokens) == (vb.sequences, vb.tokens)
        assert va.deff == pytest.approx(vb.deff, abs=tol), name
        torch.testing.assert_close(torch.tensor(va.profile), torch.tensor(vb.profile), rtol=0, atol=tol)
        torch.testing.assert_close(torch.tensor(va.similarity), torch.tensor(vb.similarity), rtol=0, atol=tol)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A saved tiny model of a family with the byte tokenizer (and n_ctx for TransformerLens 3's GPT-2 converter)."""
    cache = {}

    def save(family):
        if family not in cache:
            # No family name in the path: TransformerLens 3 guesses architectures from "llama" in it.
            folder = tmp_path_factory.mktemp(f"tl-model-{len(cache)}")
            model = tiny_model(family)
            if family == "gpt2":
                model.config.n_ctx = model.config.n_positions
            model.save_pretrained(folder)
            byte_tokenizer().save_pretrained(folder)
            cache[family] = folder
        return cache[family]

    return save


def folder_tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def bridge(family, folder, processed=False):
    from transformer_lens.model_bridge import TransformerBridge

    b = TransformerBridge.boot_transformers(
        f"tiny-{family}", hf_model=tiny_model(family), tokenizer=folder_tokenizer(folder), device="cpu"
    )
    if processed:
        b.enable_compatibility_mode(disable_warnings=True)  # HookedTransformer's default processing
    return b


def hooked_transformer(folder, processed=False):
    try:
        from transformer_lens import HookedTransformer
    except ImportError:  # TransformerLens >= 4 removed it (the Bridge is tested instead)
        pytest.skip("this TransformerLens has no HookedTransformer (removed in 4.0)")
    from transformer_lens import loading_from_pretrained as loading
    from transformers import AutoModelForCausalLM

    cfg = loading.get_pretrained_model_config(str(folder), fold_ln=processed, device="cpu")
    model = HookedTransformer(cfg, folder_tokenizer(folder), move_to_device=False)
    state = loading.get_pretrained_state_dict(str(folder), cfg, AutoModelForCausalLM.from_pretrained(folder))
    model.load_and_process_state_dict(
        state,
        fold_ln=processed,
        center_writing_weights=processed,
        center_unembed=processed,
        fold_value_biases=processed,
    )
    return model.eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_bridge_stream_gives_the_same_deff_as_the_hugging_face_model(family, model_folder):
    folder = model_folder(family)
    ids = token_ids()
    tl = measured(bridge(family, folder), ids)
    hf = measured(tiny_model(family), ids)
    assert_close_results(tl, hf)
    info = tl.provenance["model"]
    assert (
        info["library"] == "transformer_lens"
        and info["class"] == "TransformerBridge"
        and info["num_layers"] == TINY_LAYERS
    )
    assert (
        info["weight_processing"]["center_writing_weights"] is False
        and info["weight_processing"]["stream_changed"] is False
    )
    assert tl.config["architecture_source"] == "transformer_lens"


def test_bridge_tokenizes_text_with_its_own_tokenizer(model_folder):
    folder = model_folder("gpt2")
    texts = ["To be, or not to be, that is the question. " * 8, "Whether 'tis nobler in the mind to suffer. " * 8]
    tl = measured(bridge("gpt2", folder), texts, seq_len=16, num_seqs=4, bos="always")
    hf = measured(tiny_model("gpt2"), texts, seq_len=16, num_seqs=4, tokenizer=folder_tokenizer(folder), bos="always")
    assert tl.provenance["corpus"]["sha256"] == hf.provenance["corpus"]["sha256"]
    assert tl.provenance["corpus"]["bos_token_id"] == 256
    assert_close_results(tl, hf)


def test_processed_bridge_with_centred_writing_weights_is_refused(model_folder):
    processed = bridge("gpt2", model_folder("gpt2"), processed=True)
    with pytest.raises(EffdepthError) as info:
        measured(processed, token_ids())
    message = str(info.value)
    assert "\n" not in message
    assert "centred writing weights" in message and "not the model's own" in message
    assert "from_pretrained_no_processing" in message and "allow_processed=True" in message
    with pytest.raises(EffdepthError, match="allow_processed=True"):
        effdepth.capture(processed).__enter__()
    accepted = measured(processed, token_ids(), allow_processed=True, similarity="cosine")
    record = accepted.provenance["model"]["weight_processing"]
    assert (
        record["center_writing_weights"] is True
        and record["process_weights"] is True
        and record["stream_changed"] is True
    )
    # Centring removes each token's mean: the stream, and so D_eff, is not the model's own.
    # (cosine: cka's own centring across samples hides part of the change.)
    assert (
        abs(
            accepted.views["drop-pos0"].deff
            - measured(tiny_model("gpt2"), token_ids(), similarity="cosine").views["drop-pos0"].deff
        )
        > 1e-4
    )


def test_processed_rms_bridge_keeps_the_stream_and_is_accepted(model_folder):
    """RMSNorm models are not centred by TransformerLens: folding the norms leaves the stream as it was."""
    processed = bridge("llama", model_folder("llama"), processed=True)
    r = measured(processed, token_ids())
    record = r.provenance["model"]["weight_processing"]
    assert record["process_weights"] is True and record["center_unembed"] is True
    assert record["center_writing_weights"] is False and record["stream_changed"] is False
    assert_close_results(r, measured(tiny_model("llama"), token_ids()))


def test_capture_and_accumulator_on_a_bridge_equal_measure(model_folder):
    b = bridge("llama", model_folder("llama"))
    ids = token_ids()
    acc = effdepth.Accumulator(VIEWS, pooling="none", bootstrap=0)
    with effdepth.capture(b) as states, torch.no_grad():
        for i in range(0, ids.shape[0], 3):
            b(ids[i : i + 3], return_type=None)
            acc.update(states)
    assert len(states) == TINY_LAYERS + 1
    assert_close_results(acc.result(), measured(b, ids), tol=1e-9)
    assert acc.result().provenance["model"]["library"] == "transformer_lens"


def test_transformer_lens_refuses_what_it_cannot_do(model_folder):
    b = bridge("llama", model_folder("llama"))
    with pytest.raises(EffdepthError, match="no hidden_states tuple"):
        effdepth.from_hidden_states((torch.zeros(1, 2, 4),) * 4, model=b)
    with pytest.raises(EffdepthError, match="interventions are not supported on TransformerLens"):
        effdepth.intervene(b, token_ids(), carry="1,0.5", bootstrap=0, progress=False, pooling="none")


@pytest.mark.parametrize("family", FAMILIES)
def test_unprocessed_hooked_transformer_gives_the_same_deff_as_hugging_face(family, model_folder):
    folder = model_folder(family)
    model = hooked_transformer(folder)
    ids = token_ids()
    tl = measured(model, ids)
    assert tl.provenance["model"]["class"] == "HookedTransformer"
    assert tl.provenance["model"]["weight_processing"]["fold_ln"] is False
    assert_close_results(tl, measured(tiny_model(family), ids))


def test_processed_hooked_transformer_is_refused(model_folder):
    model = hooked_transformer(model_folder("gpt2"), processed=True)
    assert model.cfg.normalization_type == "LNPre"
    with pytest.raises(EffdepthError, match="from_pretrained_no_processing.*allow_processed=True"):
        measured(model, token_ids())
    record = measured(model, token_ids(), allow_processed=True).provenance["model"]["weight_processing"]
    assert record["fold_ln"] is True and record["center_writing_weights"] is True and record["center_unembed"] is True
