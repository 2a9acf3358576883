"""The Trainer's DeffCallback under DDP (torchrun, two gloo ranks on the CPU): rank 0 measures the unwrapped model
on every passage, the other rank trains on without measuring, and each step's D_eff is ``measure``'s on the
checkpoint saved at that step."""

import json
import os
import subprocess
import sys

import pytest
import torch

import effdepth

#: One rank of the run: a tiny LLaMA trained 4 steps, measured every 2 and checkpointed every 2; each rank writes
#: what it saw (its steps, the steps it measured, the steps its trainer logged a loss at).
TRAIN = """
import json, os, sys
import torch
from transformers import Trainer, TrainingArguments
from effdepth.integrations.transformers import DeffCallback
from effdepth.models.tiny import tiny_model

out, rank = sys.argv[1], int(os.environ["RANK"])
ids = torch.randint(0, 256, (32, 16), generator=torch.Generator().manual_seed(0))
passages = torch.randint(0, 256, (8, 16), generator=torch.Generator().manual_seed(1))


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return len(ids)

    def __getitem__(self, i):
        return {"input_ids": ids[i], "labels": ids[i]}


callback = DeffCallback(passages, every_steps=2, figures=False)
measured, measure = [], callback.measurement.measure
callback.measurement.measure = lambda model, step, **kw: measured.append(step) or measure(model, step, **kw)
args = TrainingArguments(
    out, max_steps=4, per_device_train_batch_size=2, save_steps=2, save_strategy="steps", logging_steps=1,
    use_cpu=True, ddp_backend="gloo", report_to=[], disable_tqdm=True,
)
trainer = Trainer(model=tiny_model("llama"), args=args, train_dataset=Rows(), callbacks=[callback])
trainer.train()
seen = {
    "world_size": trainer.args.world_size,
    "step": trainer.state.global_step,
    "measured": measured,
    "prepared": callback.measurement.prepared is not None,
    "writes": callback.measurement.trajectory is not None,
    "loss_logged": [row["step"] for row in trainer.state.log_history if "loss" in row],
}
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(seen, f)
"""


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    script = root / "train.py"
    script.write_text(TRAIN)
    out = root / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)]
    proc = subprocess.run(
        [*command, str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    return out, root, ranks


def test_training_completes_on_both_ranks_and_only_rank_0_measures(ddp_run):
    out, root, (rank0, rank1) = ddp_run
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert rank0["step"] == rank1["step"] == 4
    assert rank0["measured"] == [0, 2, 4] and rank0["prepared"] and rank0["writes"]
    # Every rank checks the passages and model at train start (bad input stops them all); only rank 0 measures.
    assert rank1["measured"] == [] and rank1["prepared"] and not rank1["writes"]
    assert [p.parent for p in root.rglob("trajectory.json")] == [out / "effdepth"]
    # A measured step is also a logging step: the trainer's own loss log there still runs (rank 0 skipping
    # it would skip the loss's all_gather the other rank waits in).
    assert rank0["loss_logged"] == [1, 2, 3, 4]


def test_each_step_is_measures_number_on_its_checkpoint(ddp_run):
    out, _, _ = ddp_run
    trajectory = effdepth.load(out / "effdepth")
    deff = {r["step"]: r["D_eff"] for r in trajectory.rows if r["view"] == "default" and r["similarity"] == "cka"}
    assert sorted(deff) == [0, 2, 4]
    passages = torch.randint(0, 256, (8, 16), generator=torch.Generator().manual_seed(1))
    for step in (2, 4):
        saved = effdepth.measure(str(out / f"checkpoint-{step}"), passages, bootstrap=0, progress=False)
        assert deff[step] == saved.default.deff
