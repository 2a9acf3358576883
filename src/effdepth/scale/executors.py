"""Where the jobs of a sweep or trajectory run: here, one at a time, or as Ray tasks.

An executor runs ``task(payload) -> outcome`` (picklable dicts) for ``(item, payload)`` pairs and calls
``on_done(item, outcome)`` here as each finishes. Only the caller writes results, so Ray workers need no
shared filesystem and a retried task writes nothing twice.

>>> ex = make_executor("local")
>>> done = []
>>> ex.run([("a", {"x": 2}), ("b", {"x": 3})], lambda p: p["x"] ** 2, lambda item, out: done.append((item, out)))
>>> done
[('a', 4), ('b', 9)]
"""

from __future__ import annotations

from typing import Callable, Iterable

from effdepth.errors import EffdepthError, one_line
from effdepth.options.groups import EXECUTORS

RAY_MISSING = "the ray executor needs Ray, which is not installed here: pip install 'effdepth[ray]'"


class LocalExecutor:
    """One job after another, in this process (the default); sharing the caller's filesystem, jobs can keep
    partial statistics next to their result and resume after an interruption."""

    name = "local"
    shares_filesystem = True

    def run(self, items: Iterable, task: Callable, on_done: Callable, on_start: Callable | None = None) -> None:
        """Run ``task(payload)`` for each ``(item, payload)``; report with ``on_done(item, outcome)``."""
        for item, payload in items:
            if on_start is not None:
                on_start(item)
            on_done(item, task(payload))


class RayExecutor:
    """Each job as a Ray task (``ray.remote(num_gpus=G, num_cpus=C)``), on a local Ray or a cluster.

    ``address``: ``None`` for a Ray started here (or ``RAY_ADDRESS``'s), else e.g. ``"ray://head:10001"``
    or ``"auto"``; a Ray already initialised is used and left running. Every node needs the same effdepth.

    >>> RayExecutor(gpus_per_task=1).resources()
    {'num_gpus': 1.0, 'num_cpus': 1.0, 'max_retries': 2}
    """

    name = "ray"
    shares_filesystem = False

    def __init__(
        self, address: str | None = None, gpus_per_task: float = 0.0, cpus_per_task: float = 1.0, max_retries: int = 2
    ):
        if gpus_per_task < 0 or cpus_per_task <= 0:
            raise EffdepthError(
                f"--gpus-per-task must be >= 0 and --cpus-per-task > 0, got {gpus_per_task} and {cpus_per_task}"
            )
        self.address = address
        self.gpus_per_task = float(gpus_per_task)
        self.cpus_per_task = float(cpus_per_task)
        self.max_retries = int(max_retries)

    def resources(self) -> dict:
        # max_retries re-runs a task whose worker died (node lost, OOM kill); the
        # task itself turns its own exceptions into outcomes, so they are not retried.
        return {"num_gpus": self.gpus_per_task, "num_cpus": self.cpus_per_task, "max_retries": self.max_retries}

    def run(self, items: Iterable, task: Callable, on_done: Callable, on_start: Callable | None = None) -> None:
        """Submit every job, then report each as it finishes (in finishing order)."""
        ray = import_ray()
        started_here = self._connect(ray)
        pending = {}
        try:
            remote = ray.remote(**self.resources())(task)
            for item, payload in items:
                if on_start is not None:
                    on_start(item)
                pending[remote.remote(payload)] = item
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    on_done(pending.pop(ref), _outcome(ray, ref))
        except BaseException:
            for ref in pending:
                ray.cancel(ref)
            raise
        finally:
            if started_here:
                ray.shutdown()

    def _connect(self, ray) -> bool:
        """Initialise Ray unless the caller already has; True when we did (and must shut down)."""
        if ray.is_initialized():
            return False
        try:
            ray.init(address=self.address, include_dashboard=False)
        except Exception as exc:  # ConnectionError, RuntimeError, ValueError... depending on the address form
            where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
            raise EffdepthError(
                f"cannot start or reach {where}: {one_line(exc, 200)}; "
                "check --ray-address (ray://HEAD:10001, HEAD:6379 or auto) and that the cluster runs"
            ) from None
        return True


def import_ray():
    """``ray``, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise EffdepthError(RAY_MISSING) from None
    return ray


def make_executor(
    name: str = "local", *, ray_address: str | None = None, gpus_per_task: float = 0.0, cpus_per_task: float = 1.0
):
    """An executor by name; Ray options with ``local`` are an error rather than silently ignored.

    >>> make_executor("local").name
    'local'
    """
    if name not in EXECUTORS:
        raise EffdepthError(f"unknown executor {name!r}; choose from {', '.join(EXECUTORS)}")
    if name == "local":
        if ray_address is not None or gpus_per_task or cpus_per_task != 1.0:
            raise EffdepthError("--ray-address, --gpus-per-task and --cpus-per-task need --executor ray")
        return LocalExecutor()
    import_ray()  # fail before any work, not at the first submission
    return RayExecutor(address=ray_address, gpus_per_task=gpus_per_task, cpus_per_task=cpus_per_task)


def _outcome(ray, ref) -> dict:
    """The task's outcome, or an error outcome when Ray itself gave up on it."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        reason = one_line(exc)
        return {
            "status": "error",
            "error": f"Ray task failed: {type(exc).__name__}: {reason}",
            "type": type(exc).__name__,
        }
