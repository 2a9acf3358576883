"""The studies built on a measurement, one folder each; importing this package registers every study's
record kind, so :func:`effdepth.load` and the reports know them.
"""

from effdepth.studies.compare import report as compare_report
from effdepth.studies.experiment import report as experiment_report
from effdepth.studies.intervene import report as intervene_report
from effdepth.studies.null import report as null_report
from effdepth.studies.prune import report as prune_report

REGISTERED = (
    intervene_report.KIND,
    experiment_report.KIND,
    null_report.KIND,
    prune_report.KIND,
    compare_report.KIND,
)
