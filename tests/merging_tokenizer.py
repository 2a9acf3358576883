"""A second offline tokenizer beside the byte tokenizer, for tests of what changes with the tokenizer: a
byte-level BPE with a few common pairs merged, so its tokens and token counts differ. Imported by name from
the test files (``from merging_tokenizer import merging_tokenizer``)."""

from __future__ import annotations

from effdepth.data.tokenizers import _byte_to_unicode


def merging_tokenizer():
    """A byte-level BPE unlike the byte tokenizer: common pairs merged, so its tokens and token counts differ."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = _byte_to_unicode()
    vocab = {char: byte for byte, char in chars.items()}
    merges = [("t", "o"), ("b", "e"), ("t", "h"), ("th", "e"), (chars[32], "to"), (chars[32], "be")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(["<s>"])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", clean_up_tokenization_spaces=False)


def save_merging_model(folder, model_type: str = "gpt2"):
    """A tiny random model of ``model_type`` with the merging tokenizer (its embeddings resized to it), saved
    in ``folder`` like any checkpoint; the folder."""
    from effdepth.models.tiny import tiny_model

    tokenizer = merging_tokenizer()
    model = tiny_model(model_type)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
