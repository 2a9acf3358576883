"""``effdepth sweep`` and ``effdepth suite``'s options, declared once."""

from __future__ import annotations

from dataclasses import dataclass

from effdepth.options import option


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
