"""The options of the commands that read saved results (claims, sensitivity, report, analyse, show) and of
torchrun's entry point, one dataclass per command. A study's or a scale command's own options live in its
folder (``studies/<name>/options.py``, ``scale/sweep/options.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from effdepth.options.declare import option

#: What ``claims``, ``sensitivity`` and ``report`` read.
RESULTS_HELP = "result.json files, a run's folder, or a sweep's folder (every result.json below it)"


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
class TorchrunOptions:
    """``python -m effdepth.scale.distributed measure``: how the ranks talk."""

    backend: str | None = option(
        None, "gloo (CPU) or nccl (GPUs); default nccl when CUDA is available", choices=("gloo", "nccl")
    )
