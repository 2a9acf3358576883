"""Each command's own options, one dataclass per command, declared once (:func:`~effdepth.options.option`):
the command line is built from them (:mod:`effdepth.options.flags`). The measurement's options are
:class:`~effdepth.options.Options`'; the shared groups are in :mod:`.groups`.
"""

from __future__ import annotations

from dataclasses import dataclass

from effdepth.options.declare import option

#: What ``claims``, ``sensitivity`` and ``report`` read.
RESULTS_HELP = "result.json files, a run's folder, or a sweep's folder (every result.json below it)"


def _carries():
    """The carry values of a carry sweep, in the model (``intervene``) or offline (``recompose``)."""
    return option("1,0.9,0.75,0.5", "comma-separated carry values in [0, 1] (default {default})")


@dataclass(frozen=True)
class InterventionOptions:
    """``effdepth intervene``: which carries, in which blocks, and where in a block."""

    carry: str = _carries()
    layers: str = option("all", "blocks to apply the carry to, 1-based: all (default), A-B, or a list like 1,3,5")
    carry_on: str = option(
        "blocks",
        "blocks (default): block output lam s_{l-1} + (s_l - s_{l-1}); sublayers (the paper's): "
        "h <- lam h + attn(LN h), then h <- lam h + mlp(LN h), in every chosen block",
    )


@dataclass(frozen=True)
class RecomposeOptions:
    """``effdepth recompose``: the saved result, the carries and the view; the bootstrap is off by default
    (the quick answer; a measurement's default would redo 1000 resamples per recomposed stream)."""

    result: str = option(
        None, "result.json (or its folder) of a passage-mode measurement, its pooled/ beside it", flags=()
    )
    carry: str = _carries()
    view: str | None = option(None, "which view of the result (default: its first)")
    bootstrap: int = option(
        0, "bootstrap resamples per recomposed stream, for intervals (default {default}: none)", kind="int"
    )


@dataclass(frozen=True)
class NullOptions:
    """``effdepth null``: the seeds of the random-weight null."""

    seeds: str = option(
        "5", "K seeds 0..K-1 (default {default}), or a comma-separated list of seeds", metavar="K|S1,S2,..."
    )


@dataclass(frozen=True)
class PruneOptions:
    """``effdepth prune-check``: how many blocks to skip, and the held-out passages."""

    skip: str = option("1..4", "numbers of blocks to skip (default {default})", metavar="K|A..B")
    heldout: int = option(64, "held-out passages for the perplexity (default {default})", kind="int", metavar="N")


@dataclass(frozen=True)
class ClaimsOptions:
    """``effdepth claims``: the results to judge."""

    results: tuple = option((), RESULTS_HELP, flags=(), nargs="+", metavar="RESULT_OR_DIR", cli_default=None)


@dataclass(frozen=True)
class SensitivityOptions(ClaimsOptions):
    """``effdepth sensitivity``: the results, and which view and similarity of each."""

    view: str = option("default", "the view to read (default: {default})")
    similarity: str | None = option(None, "the similarity to read (default: the result's primary one)")


@dataclass(frozen=True)
class ReportOptions:
    """``effdepth report``: the results and studies, the file and its format."""

    results: tuple = option(
        (),
        "result.json files, study files (intervention.json, experiment.json, trajectory.json, null.json, "
        "prune.json), or folders searched for them",
        flags=(),
        nargs="+",
        metavar="RESULT_OR_DIR",
        cli_default=None,
    )
    output: str | None = option(
        None, "output file (default report.html, or report.md with --format md)", flags=("-o", "--output")
    )
    format: str | None = option(
        None, "html (default) or md; by default taken from the -o suffix", choices=("html", "md")
    )


@dataclass(frozen=True)
class AnalyseOptions:
    """``effdepth analyse``: the saved result (the analysis options are :class:`~effdepth.options.AnalysisOptions`')."""

    result: str = option(None, "the folder of a passage-mode result (holding result.json and pooled/)", flags=())


@dataclass(frozen=True)
class ShowOptions:
    """``effdepth show``: the saved result, and how much of it."""

    result: str = option(
        None,
        "result.json, intervention.json, experiment.json or trajectory.json, or the folder holding one",
        flags=(),
    )
    all: bool = option(
        False,
        "also the measurement's facts: the model, the extra measurements, every option and the provenance "
        "(what its report's provenance section holds)",
        kind="flag",
    )


@dataclass(frozen=True)
class SuiteOptions:
    """``effdepth suite show``: which suite."""

    suite: str = option(None, "a shipped suite name or a suite .yaml file", flags=())


@dataclass(frozen=True)
class SweepOptions:
    """``effdepth sweep``: the models, and whether to write the report."""

    models: tuple = option(
        (),
        "suite name (effdepth suite list), suite file, model id, tiny:TYPE or model folder",
        flags=(),
        nargs="+",
        metavar="SUITE_OR_MODEL",
        cli_default=None,
    )
    report: bool = option(True, "do not write DIR/report.html", flags=("--no-report",), kind="no-flag")


@dataclass(frozen=True)
class TrajectoryOptions:
    """``effdepth trajectory``: the model's checkpoints, and their tokens."""

    model: str = option(None, "Hugging Face id, a local folder of checkpoints, or a preset", flags=())
    revisions: str | None = option(
        None,
        "auto (every checkpoint), every:K (every K-th and the last), log:K (K spaced evenly in log tokens over "
        "the first training track, plus main) or a comma-separated list (default auto; a preset fixes its own)",
    )
    tokens_per_step: int | None = option(
        None, "training tokens per step, when the names do not say (Pythia's is known)", kind="int"
    )


@dataclass(frozen=True)
class TorchrunOptions:
    """``python -m effdepth.scale.distributed measure``: how the ranks talk."""

    backend: str | None = option(
        None, "gloo (CPU) or nccl (GPUs); default nccl when CUDA is available", choices=("gloo", "nccl")
    )
