"""effdepth sweep over two hub models on a local Ray: each task downloads its model from the local hub
in its own worker process; the driver alone writes the results."""

import json

import pandas as pd
from hubtools import MODELS, results

import effdepth


def test_sweep_of_two_hub_models_on_ray(ray_sweep, session_hub):
    out, proc, _, machine = ray_sweep
    found = results(out)
    assert len(found) == 2 and "2 measured" in proc.stdout
    for folder in found.values():
        model = effdepth.load(folder).provenance["model"]
        assert model["id"] in MODELS and model["commit"] == session_hub.commit(model["id"])
        assert json.loads((folder / "job.json").read_text())["model"] == model["id"]
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["model"]) == set(MODELS) and set(summary["status"]) == {"ok"}
    for model in MODELS:  # downloaded by the tasks, into the caches of the machine the sweep ran on
        snapshot = machine.hub_cache / f"models--{model.replace('/', '--')}" / "snapshots" / session_hub.commit(model)
        assert (snapshot / "model.safetensors").is_file()
