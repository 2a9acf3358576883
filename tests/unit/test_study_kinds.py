"""One effdepth.load for every saved kind: the studies register their record kinds (results.loading.KINDS), and
load, effdepth show and the reports dispatch on them without importing any study."""

from __future__ import annotations

import json

import pytest
import torch

import effdepth
from effdepth.report.build import find_studies
from effdepth.report.tables import show_text
from effdepth.results.loading import KINDS, SavedStudy, StudyKind, files, register
from effdepth.studies.experiment import ExperimentResult


def test_importing_effdepth_registers_every_study_kind_in_one_order():
    assert files() == (
        "result.json",
        "intervention.json",
        "experiment.json",
        "trajectory.json",
        "null.json",
        "prune.json",
        "comparison.json",
    )
    assert len({k.schema for k in KINDS.values()}) == len(KINDS)


@pytest.fixture
def probe_kind():
    """A study kind registered as a study's module registers its own, removed afterwards."""
    kind = register(
        StudyKind(
            9,
            "probe",
            "effdepth.probe/1",
            SavedStudy,
            lambda data, path: SavedStudy("probe", data, path),
            "probe study",
            "its caption",
            lambda saved: saved.record["model"],
            lambda saved: [],
            lambda saved: None,
            lambda saved: f"probe of {saved.record['model']}",
        )
    )
    yield kind
    del KINDS["probe"]


def test_a_registered_kind_is_loaded_shown_and_reported(probe_kind, tmp_path):
    (tmp_path / "probe.json").write_text(json.dumps({"schema": "effdepth.probe/1", "model": "m"}))
    loaded = effdepth.load(tmp_path)
    assert isinstance(loaded, SavedStudy) and loaded.kind == "probe" and loaded.record["model"] == "m"
    assert show_text(loaded) == "probe of m"
    [study] = find_studies([tmp_path])
    assert (study.kind, study.title, study.caption) == ("probe", "probe study of m", "its caption")


def test_load_refuses_another_kind_than_expected_in_one_line(tmp_path):
    path = effdepth.from_states(torch.randn(4, 8, 6, 8), bootstrap=0).save(tmp_path)
    with pytest.raises(
        effdepth.EffdepthError, match=r"holds a Result, not a ExperimentResult; give its experiment\.json"
    ):
        effdepth.load(path, expect=ExperimentResult)
    with pytest.raises(effdepth.EffdepthError, match=r"^no experiment at "):
        effdepth.load(tmp_path / "missing", expect=ExperimentResult)
