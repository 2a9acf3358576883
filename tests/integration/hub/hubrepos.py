"""Repositories shaped like the real ones, for the local hub (:mod:`localhub`): tiny random models
in safetensors with a trained byte-level BPE tokenizer, and a FineWeb-Edu-shaped dataset.

- ``EleutherAI/pythia-160m`` (``gpt_neox``): ``main``, ``step1000``, and ``step512`` holding only
  a pickle ``pytorch_model.bin``;
- ``EleutherAI/pythia-1.4b`` (the ``paper-pythia`` preset's model): ``step0``, ``step1``,
  ``step2`` (the weights of ``step1``, as some early Pythia branches), ``step1000`` and ``main``
  (the weights of ``step1000``, as upstream), and ``v0`` (not a checkpoint name);
- ``allenai/OLMo-2-1124-13B`` (``olmo2``, the ``paper-olmo2`` preset's model):
  ``stage1-step0-tokens0B``, ``stage1-step1000-tokens5B``, ``stage2-ingredient1-step100-tokens1B``
  and ``main``;
- ``acme/gated-model`` (``llama``): gated, its metadata public and its files refused;
- dataset ``HuggingFaceFW/fineweb-edu``: configs ``default`` and ``sample-10BT`` declared in its
  README, split ``train``, parquet shards with a ``text`` column and FineWeb-Edu's other columns,
  documents of varied length (one blank).

Nothing here reaches the network; :func:`build` writes everything in a few seconds.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

#: Sentences the tokenizer is trained on and the documents are made of.
SENTENCES = [
    "The mitochondria is the organelle in which the cell turns food into usable energy.",
    "Photosynthesis converts light, water and carbon dioxide into sugar and oxygen.",
    "A prime number has exactly two divisors: one and itself.",
    "The French Revolution began in 1789 and reshaped the politics of Europe.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "Students learn fractions by splitting a whole into equal parts.",
    "The theory of plate tectonics explains earthquakes, volcanoes and mountain ranges.",
    "Shakespeare wrote thirty-seven plays, among them Hamlet and Macbeth.",
    "An algorithm is a finite list of instructions that solves a problem.",
    "The human heart pumps blood through arteries, capillaries and veins.",
    "Newton's second law states that force equals mass times acceleration.",
    "Rivers carry sediment from mountains to the sea over thousands of years.",
    "A good essay states its thesis early and supports it with evidence.",
    "Vaccines train the immune system to recognise a pathogen before an infection.",
    "The Pythagorean theorem relates the three sides of a right triangle.",
    "Libraries lend books, host classes and give access to computers.",
    "Electric current is the flow of charge through a conductor.",
    "The Roman Empire built roads, aqueducts and cities across the Mediterranean.",
    "Climate describes the average weather of a region over many years.",
    "Reading aloud to children builds vocabulary and a love of stories.",
]

SPECIALS = ["<|endoftext|>", "<|padding|>"]  # ids 0 and 1, as Pythia's
VOCAB = 512
DATASET = "HuggingFaceFW/fineweb-edu"
CONFIG = "sample-10BT"
GATED = "acme/gated-model"


def documents(count: int = 48, seed: int = 0) -> list[str]:
    """Educational paragraphs of 1 to 24 sentences, one blank (the stream skips it)."""
    rng = random.Random(seed)
    docs = []
    for i in range(count):
        if i == 3:
            docs.append("   ")
            continue
        n = 1 if i % 11 == 5 else rng.randint(2, 24)
        docs.append(" ".join(rng.choice(SENTENCES) for _ in range(n)))
    return docs


def save_tokenizer(folder: Path, tokenizer_class: str) -> None:
    """A byte-level BPE of 512 tokens trained on :data:`SENTENCES` (tokenizer.json and its config)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SENTENCES * 4, trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": tokenizer_class,
        "bos_token": SPECIALS[0],
        "eos_token": SPECIALS[0],
        "unk_token": SPECIALS[0],
        "pad_token": SPECIALS[1],
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": 2048,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "special_tokens_map.json").write_text(
        json.dumps(
            {"bos_token": SPECIALS[0], "eos_token": SPECIALS[0], "unk_token": SPECIALS[0], "pad_token": SPECIALS[1]},
            indent=2,
        )
    )


def save_model(folder: Path, model_type: str, seed: int, *, pickle: bool = False) -> None:
    """A tiny random ``model_type`` with the tokenizer's vocabulary, saved as safetensors (or a pickle .bin only)."""
    import torch
    from transformers import AutoModelForCausalLM

    from effdepth.models.tiny import tiny_config

    config = tiny_config(model_type)
    config.vocab_size = VOCAB
    config.bos_token_id = config.eos_token_id = 0
    config.pad_token_id = 1
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    if pickle:
        from safetensors.torch import load_file

        state = load_file(folder / "model.safetensors")
        (folder / "model.safetensors").unlink()
        torch.save(state, folder / "pytorch_model.bin")


def _repo(root: Path, kind: str, repo: str) -> Path:
    return root / f"{kind}s" / repo


def add_model_branches(root: Path, repo: str, model_type: str, tokenizer_class: str, branches: dict) -> None:
    """``branches``: ``{name: seed}`` (equal seeds give identical weights), or ``{name: (seed, "pickle")}``."""
    base = _repo(root, "model", repo) / "branches"
    saved: dict = {}
    for name, spec in branches.items():
        seed, kind = spec if isinstance(spec, tuple) else (spec, "safetensors")
        folder = base / name
        if (seed, kind) in saved:  # the same bytes, as a branch that repeats an earlier checkpoint
            for f in saved[(seed, kind)].iterdir():
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f.name).write_bytes(f.read_bytes())
        else:
            save_model(folder, model_type, seed, pickle=kind == "pickle")
            save_tokenizer(folder, tokenizer_class)
            (folder / "README.md").write_text(f"---\nlicense: apache-2.0\n---\n# {repo} at {name}\n")
            (folder / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
            saved[(seed, kind)] = folder
        if name == "main":
            (folder / "README.md").write_text(f"---\nlicense: apache-2.0\n---\n# {repo}\n")


def add_dataset(root: Path) -> list[str]:
    """The FineWeb-Edu-shaped dataset; returns the documents of ``sample-10BT`` in stream order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = _repo(root, "dataset", DATASET) / "branches" / "main"
    docs = documents()
    shards = {
        "sample/10BT/000_00000.parquet": docs[:20],
        "sample/10BT/001_00000.parquet": docs[20:],
        "data/CC-MAIN-2024-10/train-00000-of-00001.parquet": documents(8, seed=1),
    }
    for path, texts in shards.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        table = pa.table(
            {
                "text": texts,
                "id": [f"<urn:uuid:{path}:{i}>" for i in range(len(texts))],
                "dump": ["CC-MAIN-2024-10"] * len(texts),
                "url": [f"https://example.org/{i}" for i in range(len(texts))],
                "file_path": [f"s3://commoncrawl/{i}.warc.gz" for i in range(len(texts))],
                "language": ["en"] * len(texts),
                "language_score": [0.95] * len(texts),
                "token_count": [len(t.split()) for t in texts],
                "score": [3.1] * len(texts),
                "int_score": [3] * len(texts),
            }
        )
        pq.write_table(table, folder / path, row_group_size=8)
    (folder / "README.md").write_text(
        "---\nlicense: odc-by\ntask_categories:\n- text-generation\nlanguage:\n- en\n"
        "pretty_name: FineWeb-Edu (local copy for tests)\n"
        "configs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/*/*\n"
        f"- config_name: {CONFIG}\n  data_files:\n  - split: train\n    path: sample/10BT/*\n---\n"
        "# FineWeb-Edu, shaped for tests\n"
    )
    (folder / ".gitattributes").write_text("*.parquet filter=lfs diff=lfs merge=lfs -text\n")
    return [d for d in docs if d.strip()]


def build(root: Path) -> dict:
    """Every repository of the module docstring under ``root``; returns what the tests compare against."""
    from transformers.utils import logging

    root = Path(root)
    logging.disable_progress_bar()
    add_model_branches(
        root,
        "EleutherAI/pythia-160m",
        "gpt_neox",
        "GPTNeoXTokenizer",
        {"main": 0, "step1000": 1, "step512": (2, "pickle")},
    )
    add_model_branches(
        root,
        "EleutherAI/pythia-1.4b",
        "gpt_neox",
        "GPTNeoXTokenizer",
        {"step0": 10, "step1": 11, "step2": 11, "step1000": 12, "main": 12, "v0": 13},
    )
    add_model_branches(
        root,
        "allenai/OLMo-2-1124-13B",
        "olmo2",
        "GPT2Tokenizer",
        {
            "stage1-step0-tokens0B": 20,
            "stage1-step1000-tokens5B": 21,
            "stage2-ingredient1-step100-tokens1B": 22,
            "main": 23,
        },
    )
    add_model_branches(root, GATED, "llama", "PreTrainedTokenizerFast", {"main": 30})
    (_repo(root, "model", GATED) / "repo.json").write_text(json.dumps({"gated": "manual"}))
    return {"documents": add_dataset(root)}
