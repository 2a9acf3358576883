"""The Hugging Face hub, for machines that reach it and machines that do not.

Compute nodes of many clusters cannot reach the internet. The workflow this
package serves: on a login node, ``effdepth fetch`` downloads into the
standard Hugging Face cache exactly the files effdepth will read (config,
tokenizer, safetensors weights; ``hf:`` corpora as ``datasets`` caches them;
the built-in Shakespeare); on a compute node, ``--offline`` (or
``HF_HUB_OFFLINE=1``) makes every command read only that cache, and anything
missing fails in seconds with one line that names the fetch command.

The pieces, in the order a command meets them:

- :mod:`~effdepth.models.hub.network`: the offline switch (:func:`is_offline`,
  :func:`set_offline`, :func:`offline`), the reachability probe
  (:func:`hub_problem`) and the hub's answers in one line (:func:`hub_error_message`);
- :mod:`~effdepth.models.hub.cache`: what a model needs (:func:`needed_files`,
  :func:`weight_files`) and what the caches hold (:func:`cached_commit`,
  :func:`model_missing`, :func:`corpus_missing`, :func:`cached_branches`,
  :func:`cached_weight_shas`);
- :mod:`~effdepth.models.hub.needs`: the check before the first forward pass
  (:func:`check_available`; online, :func:`check_on_hub` before anything
  downloads) and the fetch command it names.

Fetching itself (what to download, and downloading it) is the workflow
:mod:`effdepth.scale.fetch`. Every name is importable from here (``hub.X``).
"""

# effdepth.scale.fetch reads the commit pattern, the Shakespeare asset path and the datasets-cache check too.
from effdepth.models.hub.cache import _COMMIT as _COMMIT
from effdepth.models.hub.cache import (
    BRANCHES_FILE,
    CHAT_TEMPLATES,
    SHAKESPEARE,
    SMALL_FILE_SUFFIXES,
    cached_branches,
    cached_commit,
    cached_weight_shas,
    corpus_missing,
    hub_cache,
    model_missing,
    needed_files,
    parse_hf_corpus,
    pickle_only,
    pickle_refusal,
    record_branches,
    repo_folder,
    weight_files,
)
from effdepth.models.hub.cache import _dataset_missing as _dataset_missing
from effdepth.models.hub.cache import _shakespeare_path as _shakespeare_path
from effdepth.models.hub.needs import (
    Need,
    check_available,
    check_gated_access,
    check_measure_inputs,
    check_on_hub,
    corpus_needs,
    fetch_command,
)
from effdepth.models.hub.network import (
    OFFLINE_VARIABLES,
    PROBE_TIMEOUT_S,
    branch_hint,
    forget_probe,
    hub_answer,
    hub_endpoint,
    hub_error_message,
    hub_page,
    hub_problem,
    is_network_error,
    is_offline,
    is_transient,
    offline,
    probe,
    probe_address,
    quiet_hub,
    set_offline,
    unreachable_message,
)

__all__ = [
    "BRANCHES_FILE",
    "CHAT_TEMPLATES",
    "OFFLINE_VARIABLES",
    "PROBE_TIMEOUT_S",
    "SHAKESPEARE",
    "SMALL_FILE_SUFFIXES",
    "Need",
    "branch_hint",
    "cached_branches",
    "cached_commit",
    "cached_weight_shas",
    "check_available",
    "check_gated_access",
    "check_measure_inputs",
    "check_on_hub",
    "corpus_missing",
    "corpus_needs",
    "fetch_command",
    "forget_probe",
    "hub_answer",
    "hub_cache",
    "hub_endpoint",
    "hub_error_message",
    "hub_page",
    "hub_problem",
    "is_network_error",
    "is_offline",
    "is_transient",
    "model_missing",
    "needed_files",
    "offline",
    "parse_hf_corpus",
    "pickle_only",
    "pickle_refusal",
    "probe",
    "probe_address",
    "quiet_hub",
    "record_branches",
    "repo_folder",
    "set_offline",
    "unreachable_message",
    "weight_files",
]
