"""``effdepth fetch``: fill the Hugging Face cache on a machine with internet, for compute nodes without it."""

from __future__ import annotations

import sys

from ..errors import EffdepthError
from .arguments import log_line


def register(sub) -> dict:
    f = sub.add_parser(
        "fetch", help="download what measure/sweep/trajectory will read, for machines without internet",
        description="Download into the Hugging Face cache exactly the files effdepth will read (config, tokenizer, "
        "safetensors weights; never pickle weights without --allow-pickle) for models, suites and checkpoint lists, and "
        "hf: corpora (plus the built-in Shakespeare when no --corpus is given). Resumable; what is cached is skipped. "
        "Then measure on a machine without internet with --offline. See docs/scale.md.",
    )
    f.add_argument("models", nargs="*", metavar="SUITE_OR_MODEL", help="suite name (effdepth suite list), suite file or model id")
    f.add_argument("--revision", action="append", default=[], help="revision to fetch (repeatable; default main; a suite's own revision wins)")
    f.add_argument("--revisions", default=None, help="checkpoints as for trajectory: auto, every:K or a comma-separated list")
    f.add_argument("--corpus", action="append", default=[], help="hf:NAME[:CONFIG[:SPLIT]] or shakespeare (repeatable; default shakespeare)")
    f.add_argument("--allow-pickle", action="store_true", help="fetch pickle (.bin) weights when a revision has no safetensors")
    f.add_argument("--trust-remote-code", action="store_true", help="also fetch the repository's Python code")
    f.add_argument("--cache-dir", default=None, help="Hugging Face cache to fill (default: HF_HUB_CACHE, ~/.cache/huggingface/hub)")
    f.add_argument("--dry-run", action="store_true", help="list what would be fetched and its size; download nothing")
    f.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    return {"fetch": cmd_fetch}


def cmd_fetch(args) -> int:
    from ..fetch import fetch
    from ..hub import hub_cache

    if not args.models and not args.corpus:
        raise EffdepthError("fetch needs a suite, a model id or --corpus; e.g. effdepth fetch paper16")
    plan = fetch(args.models, revisions=args.revision, revisions_spec=args.revisions, corpora=args.corpus,
                 allow_pickle=args.allow_pickle, trust_remote_code=args.trust_remote_code, cache_dir=args.cache_dir,
                 dry_run=args.dry_run, progress=args.progress, log=log_line)
    print()
    print(plan.table())
    where = "" if args.cache_dir is None or hub_cache(args.cache_dir) == hub_cache() else f"; measure from it with HF_HUB_CACHE={plan.cache_dir}"
    verb = "would fetch into" if args.dry_run else "cache:"
    print(f"\n{verb} {plan.cache_dir}{where}")
    if plan.problems:
        print(f"effdepth: error: {len(plan.problems)} item(s) could not be fetched; see the status column", file=sys.stderr)
        return 1
    return 0
