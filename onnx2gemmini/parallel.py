"""Run one function over many items on local processes or a Ray cluster, results in item order.

Why one module: `diff` over a dataset and `sweep` over configurations are embarrassingly parallel and want the
same three executions: in this process (one worker), on local processes (multiprocessing, spawned so that no
onnxruntime thread state is forked), or on Ray actors (`--ray ADDRESS|auto`; Ray is the optional extra
`onnx2gemmini[ray]`). Each worker builds its state once from a payload (`setup(payload)` returns the
per-item function), items travel in chunks, and results come back in item order, so a caller that folds
them in order gets the same result, bit for bit, whatever the number of workers.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import socket
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from collections.abc import Callable, Iterator, Sequence

from .errors import O2GError, UsageError

# Each worker runs single-threaded: workers are the parallelism, and oversubscribed BLAS threads on busy
# cores cost several times their work.
SINGLE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def usable_cores() -> int:
    """The cores this process may run on (the default number of workers)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_workers(workers: int | None) -> int:
    """`--workers`: a positive integer; None means every usable core."""
    if workers is None:
        return usable_cores()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"--workers: expected a positive integer, got {workers!r}")
    return workers


def map_ordered(setup: Callable, payload, items: Sequence, workers: int | None = 1, ray: str | None = None,
                chunk: int | None = None, progress: Callable[[int], None] | None = None,
                per_worker: int = 1, size: Callable | None = None) -> Iterator:
    """setup(payload)(item) for every item, yielded in item order.

    `setup` must be a module-level function (it is pickled by reference); `payload` and the items are
    pickled to the workers. `workers` None: every core (every CPU of the Ray cluster), but no more local
    processes than there are `per_worker` items for each (starting a process costs seconds). One worker
    and no `ray` runs here, in this process. `progress(n)` is called as each chunk of n items completes
    (n: the sum of `size(item)` over the chunk, when given: a batch counts its samples)."""
    items = list(items)
    if ray is not None:
        workers = None if workers is None else check_workers(workers)
        count = workers or 1
    elif workers is None:
        count = workers = max(1, min(usable_cores(), len(items) // max(1, per_worker)))
    else:
        count = workers = check_workers(workers)
    chunk = chunk or max(1, min(16, len(items) // (4 * count) or 1))
    chunks = [items[i:i + chunk] for i in range(0, len(items), chunk)]
    if ray is not None:
        results = _on_ray(setup, payload, chunks, workers, ray)
    elif workers == 1 or len(chunks) <= 1:
        fn = setup(payload)
        results = ([fn(item) for item in c] for c in chunks)
    else:
        results = _on_processes(setup, payload, chunks, workers)
    for items_done, done in zip(chunks, results):
        if progress is not None:
            progress(sum(map(size, items_done)) if size else len(done))
        yield from done


# ---- local processes ------------------------------------------------------------------------------------

_STATE: dict = {}


def _init_worker(setup: Callable, payload: bytes) -> None:
    _STATE["fn"] = setup(pickle.loads(payload))


def _run_chunk(chunk: list) -> list:
    return _run(_STATE["fn"], chunk)


def _run(fn: Callable, chunk: list) -> list:
    """The chunk's results; an O2GError travels back as its message (re-raised in the caller with its type)."""
    try:
        return [fn(item) for item in chunk]
    except O2GError as exc:
        return [_Failure(type(exc), str(exc))]


class _Failure:
    def __init__(self, kind: type, message: str):
        self.kind, self.message = kind, message


def _raise_failures(results: list) -> list:
    for r in results:
        if isinstance(r, _Failure):
            raise r.kind(r.message)
    return results


def _on_processes(setup: Callable, payload, chunks: list[list], workers: int) -> Iterator[list]:
    """Chunks on spawned processes, at most 2 per worker in flight (the items are not all copied at once);
    a worker that dies ends the run with an error instead of a hang."""
    count = min(workers, len(chunks))
    with _environment(SINGLE_THREAD_ENV):  # read by each spawned interpreter as it starts
        pool = ProcessPoolExecutor(count, multiprocessing.get_context("spawn"), _init_worker,
                                   (setup, pickle.dumps(payload)))
    with pool:
        pending = deque()
        try:
            for c in chunks:
                pending.append(pool.submit(_run_chunk, c))
                if len(pending) > 2 * count:
                    yield _raise_failures(pending.popleft().result())
            while pending:
                yield _raise_failures(pending.popleft().result())
        except BrokenProcessPool:
            raise O2GError("a worker process died (out of memory?); rerun with fewer --workers") from None
        finally:
            for f in pending:
                f.cancel()


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """Set environment variables for the duration (children started meanwhile inherit them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---- Ray ------------------------------------------------------------------------------------------------

def import_ray():
    """Ray, or a usage error that says how to get it."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray: Ray is not installed (pip install 'onnx2gemmini[ray]')") from None
    return ray


def connect_ray(address: str):
    """Connect to the Ray cluster at `address` ("auto": the one running on this machine)."""
    ray = import_ray()
    if not isinstance(address, str) or not address:
        raise UsageError("--ray: expected a cluster address (HOST:PORT of its head) or 'auto'")
    if not ray.is_initialized():
        _probe(address)
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UsageError(f"--ray {address}: cannot connect to a Ray cluster "
                             f"({str(exc).splitlines()[0][:200]})") from None
    return ray


def _probe(address: str, timeout: float = 10.0) -> None:
    """A HOST:PORT that takes no connection is an error at once (Ray itself retries for minutes)."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise UsageError(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc})") from None


class _Actor:
    """A Ray actor holding one worker's state (sessions, emulator...), built once."""

    def __init__(self, setup: Callable, payload):
        self.fn = setup(payload)  # Ray starts a num_cpus=1 actor with one OpenMP/BLAS thread

    def run(self, chunk: list) -> list:
        return _run(self.fn, chunk)


def _on_ray(setup: Callable, payload, chunks: list[list], workers: int | None, address: str) -> Iterator[list]:
    ray = connect_ray(address)
    from ray.util import ActorPool

    cluster_cpus = int(ray.cluster_resources().get("CPU", 1))
    count = max(1, min(len(chunks), cluster_cpus if workers is None else workers))
    remote = ray.remote(num_cpus=1)(_Actor)
    payload_ref = ray.put(payload)
    actors = [remote.remote(setup, payload_ref) for _ in range(count)]
    try:
        for results in ActorPool(actors).map(lambda actor, c: actor.run.remote(c), chunks):
            yield _raise_failures(results)
    except ray.exceptions.RayError as exc:  # an actor died, or a node left the cluster
        raise O2GError(f"--ray: a Ray worker failed: {str(exc).strip().splitlines()[0][:200]}") from None
    finally:
        for actor in actors:
            ray.kill(actor)

