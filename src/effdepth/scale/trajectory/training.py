"""A trajectory written while a model trains: one result per measured step, in the folder layout of
:func:`effdepth.scale.trajectory.trajectory`, so ``effdepth show``, ``report`` and ``compare`` read it as any
trajectory. Training resumed from a checkpoint appends to it: the steps after the resumed one belong to the
abandoned continuation and are dropped, the rest are kept. Each step's paired difference to the step before
(``dD_eff``, ``moved``) is filled in when training ends.

>>> import tempfile, torch, effdepth
>>> from effdepth.models.tiny import tiny_model
>>> out = tempfile.mkdtemp()
>>> r = effdepth.measure(tiny_model("llama"), torch.randint(0, 256, (8, 16)), bootstrap=0, progress=False)
>>> t = TrainingTrajectory.open(out, model="tiny-llama", options={"seq_len": 16}, passages_sha256="abc")
>>> _ = t.add(0, r, tokens_seen=0); _ = t.add(10, r, tokens_seen=160)
>>> [(row["step"], row["similarity"]) for row in effdepth.load(out).rows if row["view"] == "default"]
[(0, 'cka'), (0, 'cka-debiased'), (10, 'cka'), (10, 'cka-debiased')]
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.results.result import Result
from effdepth.scale.revisions import Checkpoint
from effdepth.scale.suites import SuiteModel
from effdepth.scale.sweep import result_rows
from effdepth.scale.sweep.jobs import Job, job_folder
from effdepth.scale.trajectory.result import SCHEMA, trajectory_from_dict
from effdepth.scale.trajectory.steps import with_step_differences

#: The files of a trajectory's tables and record (its figure is drawn once training ends).
TABLE_FILES = ("trajectory.json", "trajectory.csv", "trajectory.parquet")
logger = logging.getLogger("effdepth")

#: How ``trajectory.json`` names a trajectory measured during training (the hub's and folders' are hub, local).
SOURCE = "training"


class TrainingTrajectory:
    """The trajectory folder of one training run: :meth:`add` a step's result, :meth:`finish` draws the figure."""

    def __init__(self, out: Path, model: str, options: dict, passages_sha256: str, run: dict, rows: list, steps: list):
        self.out, self.model, self.options = out, model, options
        self.passages_sha256, self.run = passages_sha256, run
        self.rows, self.checkpoints = rows, steps

    @classmethod
    def open(
        cls,
        out,
        *,
        model: str,
        options: dict,
        passages_sha256: str,
        run: dict | None = None,
        resume_step: int | None = None,
    ) -> TrainingTrajectory:
        """The trajectory in ``out``: a new one, or, when training resumes at ``resume_step``, the one there with
        its steps up to that one (its passages must be these: the same passages at every step)."""
        out = Path(out)
        summary = out / "trajectory.json"
        if not summary.is_file():
            out.mkdir(parents=True, exist_ok=True)
            return cls(out, model, options, passages_sha256, dict(run or {}), [], [])
        data = json.loads(summary.read_text())
        if data.get("schema") != SCHEMA or data.get("source") != SOURCE:
            raise EffdepthError(
                f"{out} holds another effdepth output, not a trajectory measured during training; "
                "give the callback an empty or its own output folder"
            )
        if data.get("passages_sha256") != passages_sha256:
            raise EffdepthError(
                f"{out} was measured on other passages than this run's; every step of a trajectory is measured on "
                "the same passages: give the callback the same passages and options, or another output folder"
            )
        if resume_step is None:
            raise EffdepthError(
                f"{out} already holds a trajectory measured during training, and this run starts from step 0; "
                "give the callback another output folder, or remove that one to start over"
            )
        saved = trajectory_from_dict(data, summary)
        # Training goes on from resume_step: no step up to it is the last any more.
        kept = [
            {**c, "final": False} for c in saved.checkpoints if c.get("step") is not None and c["step"] <= resume_step
        ]
        steps = {c["step"] for c in kept}
        rows = [{**r, "final": False} for r in saved.rows if r.get("step") in steps]
        return cls(out, model, options, passages_sha256, {**(data.get("run") or {}), **(run or {})}, rows, kept)

    def has(self, step: int) -> bool:
        return any(c["step"] == step for c in self.checkpoints)

    def add(self, step: int, result: Result, *, tokens_seen: int | None = None, final: bool = False) -> Path:
        """Save the result measured at ``step`` (with its pooled vectors) and write the tables and record again;
        returns the step's folder. Whatever fails on the way leaves the folder as it was before this step."""
        checkpoint = Checkpoint(f"step-{step}", step=step, track="main", final=final, tokens_seen=tokens_seen)
        job = self._job(checkpoint)
        folder = job_folder(self.out, job)
        result.provenance["training"] = {**self.run, "step": step, "tokens_seen": tokens_seen}
        result.provenance["job"] = job.describe()
        checkpoints = [c for c in self.checkpoints if c["step"] != step] + [{**asdict(checkpoint), "key": job.key}]
        try:
            result.save(folder)
            rows = self._rows_with(step, job, result)
            self._write(sorted(checkpoints, key=lambda c: c["step"]), rows, figure=False)
        except BaseException:
            self._undo(folder)
            raise
        self.checkpoints, self.rows = sorted(checkpoints, key=lambda c: c["step"]), rows
        return folder

    def finish(self, figures: bool = True, last_step: int | None = None) -> None:
        """Once training ends: each step's paired difference to the step before (the comparisons of a whole run,
        left out of the steps so that a measurement costs its forward passes and analysis alone), the tables, the
        record and (``figures``) the trajectory figure; ``last_step``, where measured, is the final one."""
        if last_step is not None and self.has(last_step):
            self.checkpoints = [{**c, "final": c["step"] == last_step} for c in self.checkpoints]
            self.rows = [{**r, "final": r.get("step") == last_step} for r in self.rows]
        if self.checkpoints:
            self.rows = self._with_step_differences(self.rows)
            self._write(self.checkpoints, self.rows, figure=figures)

    def _rows_with(self, step: int, job: Job, result: Result) -> list:
        """The table's rows with ``step``'s (its result saved)."""
        new = [{**r, "duplicate_of": None} for r in result_rows(job, result)]
        return sorted([r for r in self.rows if r.get("step") != step] + new, key=lambda r: r["step"])

    def _with_step_differences(self, rows: list) -> list:
        """``rows`` with the difference of each step to the one before filled in where it is missing (a resumed
        run's earlier steps keep theirs)."""
        steps = sorted({r["step"] for r in rows if r.get("status") == "ok"})
        done = {r["step"] for r in rows if r.get("dD_eff") is not None}
        filled = {}
        for before, step in zip(steps, steps[1:]):
            if step not in done:
                pair = [r for r in rows if r.get("step") in (before, step)]
                compared = with_step_differences(self.out, [dict(r) for r in pair], log=logger.warning)
                filled.update((id(r), new) for r, new in zip(pair, compared) if r["step"] == step)
        return [filled.get(id(r), r) for r in rows]

    def _undo(self, folder: Path) -> None:
        """A step that failed half-way: its folder goes, and the tables and record are the ones before it."""
        shutil.rmtree(folder, ignore_errors=True)
        for parent in folder.relative_to(self.out.resolve()).parents[:-1]:  # its step's and model's, if emptied
            with contextlib.suppress(OSError):
                (self.out.resolve() / parent).rmdir()
        with contextlib.suppress(Exception):  # the step's own failure is what the caller reports
            if self.checkpoints:
                self._write(self.checkpoints, self.rows, figure=False)
            else:
                for name in TABLE_FILES:
                    (self.out / name).unlink(missing_ok=True)

    def _job(self, checkpoint: Checkpoint) -> Job:
        columns = {
            "step": checkpoint.step,
            "tokens": None,
            "tokens_seen": checkpoint.tokens_seen,
            "track": checkpoint.track,
            "final": checkpoint.final,
            "weights": None,
            "weights_source": SOURCE,
        }
        return Job(
            SuiteModel(self.model, family=SOURCE),
            self.options,
            tag=checkpoint.revision,
            name=self.model,
            extra=columns,
        )

    def _write(self, checkpoints: list, rows: list, *, figure: bool) -> None:
        from effdepth.scale.trajectory import write_trajectory

        summary = {
            "model": self.model,
            "source": SOURCE,
            "revisions": "training",
            "preset": None,
            "checkpoints": checkpoints,
            "duplicates": {},
            "skipped": [],
            "notes": [],
            "passages_sha256": self.passages_sha256,
            "run": self.run,
        }
        write_trajectory(self.out, rows, summary, title=self.model if figure else None)
