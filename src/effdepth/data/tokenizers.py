"""An offline byte-level tokenizer, built in code, for tiny models and tests: every UTF-8 byte one token
(ids 0..255), then ``<bos>`` (256), ``<eos>`` (257) and ``<pad>`` (258). Like SmolLM2's, it adds no
special tokens by itself.
"""

from __future__ import annotations

from functools import lru_cache

BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
PAD_TOKEN = "<pad>"
BYTE_VOCAB_SIZE = 259


@lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    # GPT-2's printable stand-ins for bytes, onto which the ByteLevel pre-tokenizer maps raw bytes.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def byte_tokenizer():
    """A fresh byte-level ``PreTrainedTokenizerFast`` (259 tokens; ``model_max_length`` effectively unbounded).

    >>> tok = byte_tokenizer()
    >>> tok("hé", add_special_tokens=False)["input_ids"]
    [104, 195, 169]
    >>> tok.decode([104, 195, 169]), len(tok), tok.bos_token_id
    ('hé', 259, 256)
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: byte for byte, char in _byte_to_unicode().items()}
    # No merges: BPE degenerates to one token per (byte-level) character.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([BOS_TOKEN, EOS_TOKEN, PAD_TOKEN])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        clean_up_tokenization_spaces=False,
    )
