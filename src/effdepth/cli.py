"""The ``effdepth`` command line."""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from pathlib import Path

from . import __version__
from .errors import EffdepthError
from .measure import DEFAULTS


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        raise EffdepthError(f"{self.prog}: {message} (see {self.prog} --help)")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="effdepth", description="Effective depth (D_eff) of a transformer's residual stream.")
    parser.add_argument("--version", action="version", version=f"effdepth {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    m = sub.add_parser("measure", help="measure D_eff of one model", description="Measure D_eff of one model on a corpus.")
    m.add_argument("model", nargs="?", default=None, help="Hugging Face id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    add_measure_arguments(m)
    m.add_argument("--out", "-o", default=None, help="output folder for result.json (default: runs/<model>)")
    m.add_argument("--resume", metavar="DIR", default=None, help="continue an interrupted run from its output folder")
    m.add_argument("--checkpoint-every", type=float, default=30.0, metavar="SECONDS", help="save partial statistics this often (default 30)")
    m.add_argument("--no-figures", dest="figures", action="store_false", help="do not write the figures (PNG and PDF) next to result.json")

    s = sub.add_parser("show", help="print the tables of a saved result", description="Print a saved result without re-running anything.")
    s.add_argument("result", help="result.json or the folder holding it")
    add_report_command(sub)
    add_carry_commands(sub)
    add_scale_commands(sub)
    add_hub_commands(sub)
    return parser


def add_measure_arguments(p: argparse.ArgumentParser) -> None:
    """Measurement options shared by every command that measures."""
    p.add_argument("--revision", default=None, help="model revision (branch, tag or commit) on the hub")
    p.add_argument("--corpus", default=None, help="shakespeare (default), a text/JSONL file or folder, or hf:NAME[:CONFIG[:SPLIT]]")
    p.add_argument("--seq-len", type=_int, default=DEFAULTS["seq_len"], help=f"tokens per sequence, BOS included (default {DEFAULTS['seq_len']})")
    p.add_argument("--num-seqs", type=_int, default=DEFAULTS["num_seqs"], help=f"number of sequences (default {DEFAULTS['num_seqs']})")
    p.add_argument("--batch-size", type=_int, default=DEFAULTS["batch_size"], help=f"sequences per forward pass (default {DEFAULTS['batch_size']})")
    p.add_argument("--similarity", choices=("frobenius", "token"), default="frobenius", help="layer similarity (default frobenius)")
    p.add_argument("--include-embedding", action="store_true", help="analyse S_0..S_L (N = L+1) instead of S_1..S_L")
    p.add_argument("--views", default="default", help="comma-separated views, e.g. default,drop-pos0,token-norm,top1pc, or 'paper'")
    p.add_argument("--pc-estimate", choices=("calibration", "exact"), default="calibration", help="how center/top-k PC views fit (default: first batch)")
    p.add_argument("--bootstrap", type=_int, default=DEFAULTS["bootstrap"], help=f"bootstrap resamples over sequences, 0 to skip (default {DEFAULTS['bootstrap']})")
    p.add_argument("--seed", type=_int, default=DEFAULTS["seed"], help="seed for sequence sampling and bootstrap (default 0)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: float32 on CPU, bfloat16 on CUDA)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    p.add_argument("--device-map", default=None, help="'auto' to spread a large model over the GPUs (accelerate)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow the model repository's own code to run")
    p.add_argument("--allow-pickle", action="store_true", help="allow pickle (.bin) weights; safetensors are required otherwise")
    p.add_argument("--no-bos", dest="add_bos", action="store_false", help="do not prepend the BOS token to each sequence")
    p.add_argument("--blocks-path", default=None, help="attribute path of the decoder blocks, for models outside the registry")
    p.add_argument("--embedding-path", default=None, help="attribute path of the token embedding, with --blocks-path")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")


def measure_kwargs(args: argparse.Namespace) -> dict:
    return {
        "revision": args.revision,
        "seq_len": args.seq_len,
        "num_seqs": args.num_seqs,
        "batch_size": args.batch_size,
        "similarity": args.similarity,
        "include_embedding": args.include_embedding,
        "bootstrap": args.bootstrap,
        "seed": args.seed,
        "dtype": args.dtype,
        "device": args.device,
        "device_map": args.device_map,
        "trust_remote_code": args.trust_remote_code,
        "allow_pickle": args.allow_pickle,
        "views": args.views,
        "pc_estimate": args.pc_estimate,
        "add_bos": args.add_bos,
        "blocks_path": args.blocks_path,
        "embedding_path": args.embedding_path,
        "progress": args.progress,
    }


def default_out(model: str | None) -> Path:
    """``runs/<model>``: a slug that can never leave ``runs/``.

    >>> default_out("EleutherAI/pythia-70m").as_posix()
    'runs/EleutherAI--pythia-70m'
    """
    name = "smollm2-135m-instruct" if model is None else Path(str(model)).name if str(model).endswith(".gguf") else str(model)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "--", name).strip(".-") or "model"
    return Path("runs") / slug


def ensure_writable(folder: Path) -> Path:
    """Fail before an hour of measuring, not after it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".effdepth-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise EffdepthError(f"cannot write to output folder {folder}: {exc.strerror}; choose another --out") from None
    return folder


def cmd_measure(args) -> int:
    from .measure import measure
    from .report.table import summary_text

    from .checkpoint import checkpoint_dir

    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise EffdepthError(f"--resume {args.resume} continues in that folder; drop --out {args.out} or make them equal")
    out = ensure_writable(Path(args.resume or args.out or default_out(args.model)))
    if not args.resume and (checkpoint_dir(out) / "state.json").is_file():
        print(f"effdepth: {out} holds an unfinished run; starting over (use --resume {out} to continue it instead)", file=sys.stderr)
    result = measure(args.model, args.corpus, checkpoint=checkpoint_dir(out), resume=bool(args.resume),
                     checkpoint_every_s=args.checkpoint_every, **measure_kwargs(args))
    path = result.save(out)
    print(summary_text(result))
    print(f"\nwrote {path}")
    if args.figures:
        from .report.figures import write_figures

        figures = write_figures(result, out)
        print(f"wrote {len(figures)} figures to {out}/: {', '.join(sorted({p.stem for p in figures}))} (.png, .pdf)")
    return 0


def cmd_show(args) -> int:
    from .report.table import summary_text
    from .result import load

    print(summary_text(load(args.result)))
    return 0


def add_report_command(sub) -> None:
    r = sub.add_parser(
        "report", help="write an HTML or Markdown report of saved results",
        description="One result: a report with its tables, figures and provenance. Several: a comparison table and "
        "figure (sorted by D_eff / F_N), then a section per result. HTML is one self-contained file; Markdown "
        "writes its images into <name>_files/ beside it.",
    )
    r.add_argument("results", nargs="+", metavar="RESULT_OR_DIR", help="result.json files, or folders searched for result.json")
    r.add_argument("-o", "--output", default=None, help="output file (default report.html, or report.md with --format md)")
    r.add_argument("--format", choices=("html", "md"), default=None, help="html (default) or md; by default taken from the -o suffix")


def cmd_report(args) -> int:
    from .report.build import write_report

    written = write_report(args.results, args.output, args.format)
    extra = f" and {len(written) - 1} images in {written[1].parent}/" if len(written) > 1 else ""
    print(f"wrote {written[0]}{extra}")
    return 0


COMMANDS = {"measure": cmd_measure, "show": cmd_show, "report": cmd_report}


# ---------------------------------------------------------------- residual carry: intervene, recompose, experiment


def add_carry_commands(sub) -> None:
    """The residual-carry commands (METHOD 7): in the model, offline, and trained from scratch."""
    i = sub.add_parser(
        "intervene", help="measure D_eff and loss with the residual carry scaled",
        description="For each carry lam, blocks output lam * s_{l-1} + (s_l - s_{l-1}) (lam = 1: the unmodified model); "
        "D_eff, references and next-token loss are measured on the same tokens. Writes intervention.json, "
        "carry-<lam>/result.json and intervention.{png,pdf}. For the offline version from a saved result see 'effdepth recompose'.",
    )
    i.add_argument("model", nargs="?", default=None, help="Hugging Face id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    i.add_argument("--carry", default="1,0.9,0.75,0.5", help="comma-separated carry values in [0, 1] (default 1,0.9,0.75,0.5)")
    i.add_argument("--layers", default="all", help="blocks to apply the carry to, 1-based: all (default), A-B, or a list like 1,3,5")
    add_measure_arguments(i)
    i.add_argument("--out", "-o", default=None, help="output folder (default: runs/<model>/intervention)")

    r = sub.add_parser(
        "recompose", help="offline carry sweep and decorrelation of a saved result",
        description="Rebuild the measured stream from its updates without running the model: S'_l = lam S'_{l-1} + U_l "
        "(carry sweep), and the same with the updates orthogonalised in order, energies kept (decorrelated; at lam = 1 "
        "this equals R_matched). Uses only the result's increment Gram matrix, so always the frobenius similarity.",
    )
    r.add_argument("result", help="result.json (or its folder) written by effdepth measure")
    r.add_argument("--carry", default="1,0.9,0.75,0.5", help="comma-separated carry values in [0, 1] (default 1,0.9,0.75,0.5)")
    r.add_argument("--view", default=None, help="which view of the result (default: its first)")
    r.add_argument("--out", "-o", default=None, help="also write recompose.json into this folder")

    e = sub.add_parser("experiment", help="controlled training experiments", description="Train small models from scratch and measure them.")
    kinds = e.add_subparsers(dest="experiment", parser_class=_Parser, metavar="EXPERIMENT", required=True)
    c = kinds.add_parser(
        "carry", help="train tiny Llamas with a fixed residual carry and measure D_eff",
        description="Train one tiny byte-level Llama per carry value (and seed), identical but for the carry in every block, "
        "on the built-in Shakespeare; save Hugging Face checkpoints DIR/lam-<lam>/seed-<k>/step-<N>/ and measure each on "
        "held-out sequences WITH its carry (stored as effdepth_carry in the config; a plain 'effdepth measure' of such a "
        "checkpoint measures the lam = 1 model). Writes DIR/experiment.json and DIR/experiment.{png,pdf}.",
    )
    from .experiment.carry import CarryExperiment

    d = CarryExperiment()
    c.add_argument("--carry", default=",".join(f"{x:g}" for x in d.carries), help=f"carry values in [0, 1] (default {','.join(f'{x:g}' for x in d.carries)})")
    c.add_argument("--carry-layers", default=d.carry_layers, help="blocks that get the carry: all (default), A-B or a list")
    c.add_argument("--layers", type=_int, default=d.layers, help=f"number of blocks (default {d.layers})")
    c.add_argument("--d-model", type=_int, default=d.d_model, help=f"hidden size (default {d.d_model})")
    c.add_argument("--heads", type=_int, default=d.heads, help=f"attention heads (default {d.heads})")
    c.add_argument("--steps", type=_int, default=d.steps, help=f"training steps (default {d.steps})")
    c.add_argument("--batch-size", type=_int, default=d.batch_size, help=f"sequences per step (default {d.batch_size})")
    c.add_argument("--seq-len", type=_int, default=d.seq_len, help=f"tokens per sequence, BOS included (default {d.seq_len})")
    c.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr:g})")
    c.add_argument("--warmup", type=_int, default=d.warmup, help=f"warm-up steps (default {d.warmup})")
    c.add_argument("--save-every", type=_int, default=None, help="checkpoint interval in steps (default: steps / 4; step 0 and the last are always saved)")
    c.add_argument("--seed", type=_int, default=d.seed, help=f"first seed: initialisation, data order, held-out draw (default {d.seed})")
    c.add_argument("--seeds", type=_int, default=d.seeds, help=f"number of seeds per carry value, for intervals over seeds (default {d.seeds})")
    c.add_argument("--eval-seqs", type=_int, default=d.eval_seqs, help=f"held-out sequences measured at each checkpoint (default {d.eval_seqs})")
    c.add_argument("--bootstrap", type=_int, default=d.bootstrap, help=f"bootstrap resamples per measurement (default {d.bootstrap})")
    c.add_argument("--corpus", default=d.corpus, help="training and held-out text: shakespeare (default), a text/JSONL file or folder")
    c.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    c.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    c.add_argument("--out", "-o", default="runs/carry-experiment", help="output folder (default runs/carry-experiment)")


def cmd_intervene(args) -> int:
    from .capture.intervention import check_layer_spec, parse_carry
    from .intervene import intervene

    kwargs = measure_kwargs(args)
    # Bad carry values or layers fail before the output folder and the weights.
    carries = parse_carry(args.carry)
    check_layer_spec(args.layers)
    out = ensure_writable(Path(args.out) if args.out else default_out(args.model) / "intervention")
    result = intervene(args.model, args.corpus, carry=carries, layers=args.layers, **kwargs)
    path = result.save(out)
    print(result.headline())
    print()
    print(result.table())
    print(f"\nwrote {path}, {len(carries)} results under {out}/carry-*/ and {out / 'intervention'}.{{png,pdf}}")
    return 0


def cmd_recompose(args) -> int:
    from .capture.intervention import parse_carry
    from .intervene import recompose_report
    from .result import load, write_json_atomic

    carries = parse_carry(args.carry)
    data, text = recompose_report(load(args.result), carries, view=args.view)
    print(text)
    if args.out:
        path = ensure_writable(Path(args.out)) / "recompose.json"
        write_json_atomic(path, data)
        print(f"\nwrote {path}")
    return 0


def cmd_experiment(args) -> int:
    from .experiment.carry import CarryExperiment, carry_experiment

    spec = CarryExperiment(
        carries=args.carry, carry_layers=args.carry_layers, layers=args.layers, d_model=args.d_model, heads=args.heads,
        steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr, warmup=args.warmup,
        save_every=args.save_every, seed=args.seed, seeds=args.seeds, eval_seqs=args.eval_seqs, bootstrap=args.bootstrap,
        corpus=args.corpus, device=args.device,
    ).checked()
    out = ensure_writable(Path(args.out))
    result = carry_experiment(spec, out, progress=args.progress)
    print(result.headline())
    print()
    print(result.final_table())
    print()
    print(result.step_table())
    print(f"\nwrote {out / 'experiment.json'} and {out / 'experiment'}.{{png,pdf}}; checkpoints under {out}/lam-*/seed-*/step-*/")
    return 0


COMMANDS.update({"intervene": cmd_intervene, "recompose": cmd_recompose, "experiment": cmd_experiment})


# ---------------------------------------------------------------- suites, sweeps, trajectories


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def add_scale_commands(sub) -> None:
    """``suite``, ``sweep`` and ``trajectory``: many models or checkpoints, locally or on Ray (docs/scale.md)."""
    s = sub.add_parser("suite", help="list or show the model suites", description="Model suites: named lists of models for 'effdepth sweep'.")
    actions = s.add_subparsers(dest="suite_command", parser_class=_Parser, metavar="ACTION", required=True)
    actions.add_parser("list", help="the suites shipped with effdepth")
    show = actions.add_parser("show", help="the models of a suite")
    show.add_argument("suite", help="a shipped suite name or a suite .yaml file")

    w = sub.add_parser(
        "sweep", help="measure every model of a suite (resumable)",
        description="Measure each model (suite names, suite files, ids, tiny:TYPE or folders) with the same options. "
        "Results go to DIR/<model>/<revision>/effdepth-<version>-<config hash>/result.json, written atomically: rerunning "
        "the same command skips finished models; a failing model leaves error.json and the rest go on. Writes "
        "DIR/summary.{csv,parquet}, DIR/suite.{png,pdf} and DIR/report.html. Exits 1 when a model failed. See docs/scale.md.",
    )
    w.add_argument("models", nargs="+", metavar="SUITE_OR_MODEL", help="suite name (effdepth suite list), suite file, model id, tiny:TYPE or model folder")
    w.add_argument("--out", "-o", required=True, help="output folder (results, summary, figure, report)")
    add_measure_arguments(w)
    _add_executor_arguments(w)
    w.add_argument("--no-figures", dest="figures", action="store_false", help="do not write DIR/suite.{png,pdf}")
    w.add_argument("--no-report", dest="report", action="store_false", help="do not write DIR/report.html")

    t = sub.add_parser(
        "trajectory", help="measure a model across its training checkpoints",
        description="Measure a model at its training checkpoints: the hub repository's branches (Pythia step1000, OLMo-2 "
        "stage1-step1000-tokens5B, ...) or a local folder with one save_pretrained subfolder per checkpoint (step-100, "
        "checkpoint-100). Checkpoints with the same weights as an earlier one are flagged, not measured again. Writes "
        "DIR/trajectory.{csv,parquet,json} and DIR/trajectory.{png,pdf}. See docs/scale.md.",
    )
    t.add_argument("model", help="Hugging Face id or a local folder of checkpoints")
    t.add_argument("--revisions", default="auto", help="auto (every checkpoint), every:K (every K-th and the last) or a comma-separated list (default auto)")
    t.add_argument("--tokens-per-step", type=_int, default=None, help="training tokens per step, when the names do not say (Pythia's is known)")
    t.add_argument("--out", "-o", required=True, help="output folder")
    add_measure_arguments(t)
    _add_executor_arguments(t)
    t.add_argument("--no-figures", dest="figures", action="store_false", help="do not write DIR/trajectory.{png,pdf}")


def _add_executor_arguments(p) -> None:
    p.add_argument("--executor", choices=("local", "ray"), default="local", help="local: one model at a time here (default); ray: each model a Ray task")
    p.add_argument("--ray-address", default=None, help="Ray cluster to join (ray://HEAD:10001, HEAD:6379 or auto; default: start Ray here)")
    p.add_argument("--gpus-per-task", type=_float, default=0.0, help="GPUs each Ray task reserves (default 0)")
    p.add_argument("--cpus-per-task", type=_float, default=1.0, help="CPUs each Ray task reserves (default 1)")
    p.add_argument("--checkpoint-every", type=_float, default=30.0, metavar="SECONDS",
                   help="local executor: save a model's partial statistics this often, and on Ctrl-C/SIGTERM; a rerun continues them (default 30)")


def _scale_kwargs(args) -> dict:
    kwargs = measure_kwargs(args)
    kwargs.update(corpus=args.corpus, executor=args.executor, ray_address=args.ray_address, gpus_per_task=args.gpus_per_task,
                  cpus_per_task=args.cpus_per_task, figures=args.figures, checkpoint_every_s=args.checkpoint_every,
                  log=lambda line: print(line, flush=True))
    return kwargs


def cmd_suite(args) -> int:
    from .suites import load_suite, suite_names

    if args.suite_command == "list":
        for name in suite_names():
            suite = load_suite(name)
            print(f"{name:<10} {len(suite.models):>3} models  {suite.description}")
        return 0
    suite = load_suite(args.suite)
    print(f"{suite.name}: {suite.description}\n")
    print(suite.table())
    return 0


def cmd_sweep(args) -> int:
    from .sweep import sweep

    out = ensure_writable(Path(args.out))
    outcome = sweep(args.models, out, report=args.report, **_scale_kwargs(args))
    print()
    print(outcome.table())
    counts = _counts_text(outcome.counts)
    print(f"\n{counts}; wrote {', '.join(p.name for p in outcome.files)} in {out}/")
    return 1 if outcome.counts.get("error") else 0


def cmd_trajectory(args) -> int:
    from .trajectory import trajectory

    if args.revision is not None:
        raise EffdepthError("trajectory takes --revisions (auto, every:K or a list), not --revision")
    out = ensure_writable(Path(args.out))
    kwargs = _scale_kwargs(args)
    kwargs.pop("revision")
    outcome = trajectory(args.model, out, revisions=args.revisions, tokens_per_step=args.tokens_per_step, **kwargs)
    print()
    print(outcome.table())
    print(f"\n{len(outcome.checkpoints)} checkpoints ({_counts_text(outcome.counts)}), {len(outcome.duplicates)} duplicates flagged; "
          f"wrote {', '.join(p.name for p in outcome.files)} in {out}/")
    return 1 if outcome.counts.get("error") else 0


def _counts_text(counts: dict) -> str:
    words = {"done": "done before", "ok": "measured", "error": "failed"}
    return ", ".join(f"{counts[s]} {words[s]}" for s in words if counts.get(s)) or "nothing to do"


COMMANDS.update({"suite": cmd_suite, "sweep": cmd_sweep, "trajectory": cmd_trajectory})


# ---------------------------------------------------------------- the hub: fetch, and --offline (docs/scale.md)

#: Commands that read models and corpora: they take --offline.
OFFLINE_COMMANDS = ("measure", "intervene", "sweep", "trajectory")


def add_hub_commands(sub) -> None:
    """``fetch`` (fill the Hugging Face cache on a login node) and ``--offline`` on the commands that measure."""
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
    for name in OFFLINE_COMMANDS:
        sub.choices[name].add_argument(
            "--offline", action="store_true",
            help="read only the local Hugging Face cache (sets HF_HUB_OFFLINE=1); fill it with 'effdepth fetch' where there is internet")


def cmd_fetch(args) -> int:
    from .hub import fetch, hub_cache

    if not args.models and not args.corpus:
        raise EffdepthError("fetch needs a suite, a model id or --corpus; e.g. effdepth fetch paper16")
    plan = fetch(args.models, revisions=args.revision, revisions_spec=args.revisions, corpora=args.corpus,
                 allow_pickle=args.allow_pickle, trust_remote_code=args.trust_remote_code, cache_dir=args.cache_dir,
                 dry_run=args.dry_run, progress=args.progress, log=lambda line: print(line, flush=True))
    print()
    print(plan.table())
    where = "" if args.cache_dir is None or hub_cache(args.cache_dir) == hub_cache() else f"; measure from it with HF_HUB_CACHE={plan.cache_dir}"
    verb = "would fetch into" if args.dry_run else "cache:"
    print(f"\n{verb} {plan.cache_dir}{where}")
    if plan.problems:
        print(f"effdepth: error: {len(plan.problems)} item(s) could not be fetched; see the status column", file=sys.stderr)
        return 1
    return 0


def _with_hub_options(command):
    """Apply --offline before the command imports anything from the hub, and keep the hub's retry chatter quiet."""

    def run(args) -> int:
        from .hub import quiet_hub, set_offline

        if getattr(args, "offline", False):
            set_offline(True)
        with quiet_hub():
            return command(args)

    return run


COMMANDS["fetch"] = _with_hub_options(cmd_fetch)
COMMANDS.update({name: _with_hub_options(COMMANDS[name]) for name in OFFLINE_COMMANDS})


def main(argv=None) -> int:
    """Entry point; returns the exit status (0, 2 for a user error, 130 on Ctrl-C)."""
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help()
            return 2
        return COMMANDS[args.command](args)
    except EffdepthError as exc:
        print(f"effdepth: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("effdepth: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: one line, the traceback on request
        if os.environ.get("EFFDEPTH_DEBUG"):
            traceback.print_exc()
        else:
            print(
                f"effdepth: internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
                "(set EFFDEPTH_DEBUG=1 for the traceback, and please report it)",
                file=sys.stderr,
            )
        return 1


if __name__ == "__main__":
    sys.exit(main())
