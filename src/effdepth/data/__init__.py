"""Data loading: embedded assets, corpora to token sequences, a byte tokenizer.

>>> from effdepth.data import byte_tokenizer, load_corpus
>>> load_corpus(["a tiny corpus"], byte_tokenizer(), seq_len=4, num_seqs=2).input_ids.shape
torch.Size([2, 4])
"""

from effdepth.data.assets import smollm2_gguf
from effdepth.data.corpus import TokenizedCorpus, ids_sha256, load_corpus
from effdepth.data.tokenizers import byte_tokenizer
