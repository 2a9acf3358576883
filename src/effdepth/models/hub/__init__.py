"""The Hugging Face hub, for machines that reach it and machines that do not.

On a login node ``effdepth fetch`` (:mod:`effdepth.scale.fetch`) downloads into
the standard Hugging Face cache exactly the files effdepth will read; on a
compute node ``--offline`` (or ``HF_HUB_OFFLINE=1``) makes every command read
only that cache, and anything missing fails in seconds with one line that
names the fetch command. :mod:`.network`: the offline switch, the reachability
probe and the hub's answers in one line; :mod:`.cache`: what a model needs and
what the caches hold; :mod:`.needs`: the check before the first forward pass.
Every name is importable from here (``hub.X``).
"""

# effdepth.scale.fetch reads the commit pattern, the Shakespeare asset path and the datasets-cache check too.
from effdepth.models.hub.cache import _COMMIT as _COMMIT
from effdepth.models.hub.cache import (
    SHAKESPEARE,
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
    corpus_needs,
    fetch_command,
)
from effdepth.models.hub.network import (
    forget_probe,
    hub_answer,
    hub_endpoint,
    hub_error_message,
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
