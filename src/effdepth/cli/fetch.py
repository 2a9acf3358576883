"""``effdepth fetch``: fill the Hugging Face cache on a machine with internet, for compute nodes without it."""

from __future__ import annotations

import sys

from effdepth.cli.arguments import log_line
from effdepth.errors import EffdepthError
from effdepth.options import LoadOptions, RunOptions
from effdepth.options.flags import add_option_arguments
from effdepth.options.groups import FetchOptions

#: ``--protocol`` fetches 1/20 more documents than it has passages: a document of fewer than a
#: passage's minimum tokens is skipped, and the run then reads the next one.
PROTOCOL_DOCUMENT_MARGIN = 20


def register(sub) -> dict:
    f = sub.add_parser(
        "fetch",
        help="download what measure/sweep/trajectory will read, for machines without internet",
        description="Download into the Hugging Face cache exactly the files effdepth will read (config, tokenizer, "
        "safetensors weights; never pickle weights without --allow-pickle) for models, suites and checkpoint lists, and "
        "hf: corpora (plus the built-in Shakespeare when no --corpus is given). Resumable; what is cached is skipped. "
        "--protocol paper fetches the paper's corpus: the first FineWeb-Edu documents, streamed into effdepth's cache "
        "(about 50 MB, not the whole dataset). Then measure on a machine without internet with --offline. "
        "See docs/scale.md.",
    )
    add_option_arguments(f, FetchOptions)
    add_option_arguments(f, LoadOptions, names=("allow_pickle", "trust_remote_code"))
    add_option_arguments(f, RunOptions, names=("progress",))
    return {"fetch": cmd_fetch}


def protocol_corpus(protocol: str | None, corpora: list, documents: int | None) -> tuple[list, int | None]:
    """The corpora and document count to fetch, with ``--protocol``'s corpus added.

    >>> protocol_corpus("paper", [], None)
    (['hf:HuggingFaceFW/fineweb-edu:sample-10BT:train'], 10500)
    """
    from effdepth.options import PROTOCOLS, check_protocol

    check_protocol(protocol)
    if protocol is None:
        return list(corpora), documents
    settings = PROTOCOLS[protocol].settings
    wanted = settings["num_seqs"] + settings["num_seqs"] // PROTOCOL_DOCUMENT_MARGIN
    return list(dict.fromkeys([*corpora, settings["corpus"]])), max(documents or 0, wanted)


def cmd_fetch(args) -> int:
    from effdepth.models.hub import hub_cache
    from effdepth.scale.fetch import plan_fetch, run_fetch

    corpora, documents = protocol_corpus(args.protocol, args.corpus, args.documents)
    if not args.models and not corpora:
        raise EffdepthError(
            "fetch needs a suite, a model id, --corpus or --protocol; e.g. effdepth fetch paper16 --protocol paper"
        )
    plan = plan_fetch(
        args.models,
        revisions=args.revision,
        revisions_spec=args.revisions,
        corpora=corpora,
        documents=documents,
        allow_pickle=args.allow_pickle,
        trust_remote_code=args.trust_remote_code,
        cache_dir=args.cache_dir,
        log=log_line,
    )
    if not args.dry_run:
        run_fetch(plan, progress=args.progress, log=log_line)
    print()
    print(plan.table())
    where = (
        ""
        if args.cache_dir is None or hub_cache(args.cache_dir) == hub_cache()
        else f"; measure from it with HF_HUB_CACHE={plan.cache_dir}"
    )
    verb = "would fetch into" if args.dry_run else "cache:"
    print(f"\n{verb} {plan.cache_dir}{where}")
    if any(item.documents is not None for item in plan.items):
        from effdepth.data.corpus_prefix import corpora_dir

        print(f"first documents of hf: corpora: {corpora_dir()} (EFFDEPTH_CACHE)")
    if plan.problems:
        print(
            f"effdepth: error: {len(plan.problems)} item(s) could not be fetched; see the status column",
            file=sys.stderr,
        )
        return 1
    return 0
