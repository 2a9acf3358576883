"""Suite files: shipped ones parse and name well-formed models; bad files fail in one line."""

import pytest

from effdepth.cli import main
from effdepth.errors import EffdepthError
from effdepth.models.tiny import TINY_MODEL_TYPES
from effdepth.scale.suites import SuiteModel, check_model_id, load_suite, parse_suite, resolve_models, suite_names

# The paper's Table 2 (PAPER-PROTOCOL.md section 2), as hub ids.
PAPER16 = (
    [f"EleutherAI/pythia-{s}" for s in ("70m", "160m", "410m", "1b", "1.4b")]
    + ["allenai/OLMo-2-0425-1B", "allenai/OLMo-2-1124-7B", "allenai/OLMo-2-1124-13B"]
    + ["meta-llama/Llama-3.1-8B", "mistralai/Mistral-7B-v0.1", "google/gemma-3-12b-pt"]
    + [f"Qwen/Qwen3.5-{s}-Base" for s in ("0.8B", "2B", "4B", "9B")]
    + ["Qwen/Qwen3.5-27B"]
)


@pytest.mark.parametrize("name", suite_names())
def test_every_shipped_suite_parses_with_well_formed_ids(name):
    suite = load_suite(name)
    assert suite.name == name and suite.description and suite.models
    for m in suite.models:
        assert check_model_id(m.id) == m.id
        assert m.family


def test_paper16_is_our_reading_of_the_paper():
    suite = load_suite("paper16")
    assert [m.id for m in suite.models] == PAPER16
    assert "table 2" in suite.description.lower()
    assert suite.families() == ["pythia", "olmo2", "llama3", "mistral", "gemma3", "qwen3.5"]
    # every model names its Table 2 row, and that row exists in the shipped table
    from effdepth.data.paper import table2_row

    assert all(table2_row(m.id, m.paper) is not None for m in suite.models)
    sizes = {m.id: m.params for m in suite.models}
    assert sizes["EleutherAI/pythia-1.4b"] == 1_400_000_000 and sizes["Qwen/Qwen3.5-0.8B-Base"] == 800_000_000


def test_tiny_suite_names_real_tiny_types():
    models = load_suite("tiny").models
    assert {"tiny:llama", "tiny:gpt2", "tiny:gpt_neox", "tiny:qwen3", "tiny:gemma2"} <= {m.id for m in models}
    assert all(m.is_tiny and m.tiny_type in TINY_MODEL_TYPES and m.revision is None for m in models)


def test_a_user_file_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: mine\nmodels:\n  - {id: EleutherAI/pythia-70m, revision: step1000, params: 70M, note: early}\n  - tiny:llama\n"
    )
    suite = load_suite(path)
    assert suite.models[0] == SuiteModel("EleutherAI/pythia-70m", None, "step1000", 70_000_000, "early")
    assert suite.models[1].family == "llama"
    assert [m.id for m in resolve_models([str(path), "tiny:llama", "tiny"])][:3] == [
        "EleutherAI/pythia-70m",
        "tiny:llama",
        "tiny:gpt2",
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: s\nmodels: [{id: a/b, familly: x}]", "model 1: unknown key 'familly'"),
        ("name: s\nmodel: [{id: a/b}]", "unknown key 'model'"),
        ("name: s\nmodels: [{family: x}]", "model 1: missing 'id'"),
        ("name: s\nmodels: [{id: a/b}, {id: ''}]", "model 2: missing 'id'"),
        ("name: s\nmodels: [{id: ../etc/passwd}]", "malformed model id '../etc/passwd'"),
        ("name: s\nmodels: [{id: /abs/path}]", "malformed model id"),
        ("name: s\nmodels: [{id: a/b/c}]", "malformed model id"),
        ("name: s\nmodels: [{id: a/..}]", "malformed model id"),
        ("name: s\nmodels: [{id: 'tiny:nope'}]", "unknown tiny model"),
        ("name: s\nmodels: [{id: a/b, revision: ../main}]", "malformed revision"),
        ("name: s\nmodels: [{id: a/b, revision: /abs}]", "malformed revision"),
        ("name: s\nmodels: [{id: 'tiny:gpt2', revision: step1}]", "tiny models have no revisions"),
        ("name: s\nmodels: [{id: a/b, params: lots}]", "params must be"),
        ("name: s\nmodels: [{id: a/b}, {id: a/b}]", "listed twice"),
        ("name: s\nmodels: []", "non-empty list"),
        ("models: [{id: a/b}]", "needs a 'name'"),
        ("- just a list", "a suite is a mapping"),
        ("name: [unclosed", "not valid YAML"),
    ],
)
def test_bad_suites_fail_in_one_line(text, message):
    with pytest.raises(EffdepthError) as info:
        parse_suite(text, source="bad.yaml")
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("bad.yaml")


def test_unknown_suite_or_model_spec():
    with pytest.raises(EffdepthError, match="no suite 'nope.yaml'"):
        load_suite("nope.yaml")
    with pytest.raises(EffdepthError, match="is not a suite"):
        resolve_models(["not an id"])


def test_cli_suite_list_and_show(capsys):
    assert main(["suite", "list"]) == 0
    out = capsys.readouterr().out
    assert "paper16" in out and "tiny" in out
    assert main(["suite", "show", "paper16"]) == 0
    out = capsys.readouterr().out
    assert "allenai/OLMo-2-1124-13B" in out and "27B" in out


def test_cli_suite_show_bad_input_exits_2(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: s\nmodels: [{idd: a/b}]\n")
    for argv in (["suite", "show", "nope"], ["suite", "show", str(bad)], ["suite"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("effdepth: error:") and "\n" not in err
