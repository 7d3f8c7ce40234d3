"""Sharding and resumable state for invariance measurement.

Ranks split the images into contiguous blocks; every accumulator is a float64 tensor that is
combined across ranks by gathering all parts and adding them in rank order (deterministic, the
same on every rank), and ``FeatureStats`` are merged in rank order. Each rank writes its partial
state to its own file atomically, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from invfast.io import atomic_torch_save, load_verified
from invfast.runtime.launch import Rank
from invfast.stats import FeatureStats

STATE_FORMAT = "invfast.measure-state/3"


class StateMismatchError(ValueError):
    """A saved partial state belongs to a run with other settings or other data."""


class RankLostError(RuntimeError):
    """Another rank of a distributed measurement stopped answering: it died, was stopped, or did not reach a
    collective within the process group's timeout."""


#: the source location gloo and NCCL put before their messages ("[/path/pair.cc:553] ")
_BACKEND_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


@contextlib.contextmanager
def collective(shard: Rank, what: str) -> Iterator[None]:
    """Run one collective of ``shard``'s group; a backend failure (a peer closed its connection, or did not
    answer within the group's timeout) becomes one :class:`RankLostError` line naming this rank and ``what``."""
    try:
        yield
    except RankLostError:
        raise
    except RuntimeError as e:  # gloo and NCCL raise RuntimeError (DistBackendError is one)
        first = _BACKEND_PREFIX.sub("", str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
        cause = first.split(". ")[0].rstrip(".")
        raise RankLostError(
            f"rank {shard.rank} of {shard.world_size} lost another rank while {what} ({cause}): a process died, "
            "was stopped or ran out of memory (its own output says which); the state saved so far is kept: "
            "rerun the same command to resume"
        ) from e


def _comm_device() -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sum_in_rank_order(t: torch.Tensor, shard: Rank) -> torch.Tensor:
    """Sum of ``t`` over ranks, added in rank order (bitwise identical on every rank)."""
    if not shard.distributed:
        return t
    dev = _comm_device()
    x = t.detach().to(dev).contiguous()
    parts = [torch.empty_like(x) for _ in range(shard.world_size)]
    with collective(shard, "adding the ranks' sums"):
        dist.all_gather(parts, x)
    out = parts[0].clone()
    for p in parts[1:]:
        out += p
    return out.to(t.device)


def merge_stats(local: FeatureStats, shard: Rank) -> FeatureStats:
    """All ranks' FeatureStats merged in rank order (every rank gets the same result)."""
    if not shard.distributed:
        return local
    state = local.state_dict() if local.n > 0 else None
    states: list[Any] = [None] * shard.world_size
    with collective(shard, "merging the ranks' feature statistics"):
        dist.all_gather_object(states, state)
    out = FeatureStats(device=local.device)
    for s in states:
        if s is not None:
            out.merge(FeatureStats.from_state_dict(s, device=local.device, check_moments=False))
    return out


def gather_objects(obj: Any, shard: Rank) -> list[Any]:
    if not shard.distributed:
        return [obj]
    out: list[Any] = [None] * shard.world_size
    with collective(shard, "gathering the ranks' results"):
        dist.all_gather_object(out, obj)
    return out


def from_first_rank(compute: Callable[[], Any], shard: Rank, what: str) -> Any:
    """``compute()`` run on rank 0 only, its value (or the exception it raised, raised again on every rank)
    sent to every rank: work that reads the same files on every rank (listing a folder, fingerprinting its
    files) done once, as a multi-node run on a shared file system wants it."""
    if not shard.distributed:
        return compute()
    box: list[Any] = [None]
    mine: Exception | None = None  # rank 0's own exception, raised there with its traceback
    if shard.rank == 0:
        try:
            box[0] = ("value", compute())
        except Exception as e:  # noqa: BLE001 - every rank raises it, not only rank 0
            box[0] = ("error", e if _picklable(e) else RuntimeError(f"rank 0: {type(e).__name__}: {e}"))
            mine = e
    with collective(shard, what):
        dist.broadcast_object_list(box, src=0)
    kind, value = box[0]
    if kind == "error":
        raise mine if mine is not None else value
    return value


def _picklable(obj: Any) -> bool:
    """Whether ``obj`` survives a pickle round trip (an exception whose ``__init__`` takes other arguments than
    its ``args`` pickles but does not unpickle)."""
    try:
        pickle.loads(pickle.dumps(obj))
    except Exception:  # noqa: BLE001 - any failure means: send a description instead
        return False
    return True


def barrier(shard: Rank) -> None:
    if shard.distributed:
        with collective(shard, "waiting for every rank at a barrier"):
            dist.barrier()


def state_file(path: str | os.PathLike, shard: Rank) -> str:
    """The state file of this rank: ``path`` itself for one process, ``path.rank<r>`` otherwise."""
    p = os.fspath(path)
    return p if not shard.distributed else f"{p}.rank{shard.rank}"


def saved_world_size(path: str | os.PathLike) -> int | None:
    """How many processes saved the state files of ``path`` (``path`` itself: 1; ``path.rank0`` ..
    ``path.rank<N-1>``: N); None where there are none. A mixture names the larger."""
    p = os.fspath(path)
    folder, base = os.path.split(p)
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return None
    suffixes = [n[len(base) + 5 :] for n in names if n.startswith(base + ".rank")]
    ranks = [int(r) for r in suffixes if r.isdigit()]
    if ranks:
        return max(ranks) + 1
    return 1 if base in names else None


def world_size_problem(path: str | os.PathLike, shard: Rank) -> str | None:
    """One line where the saved state of ``path`` was written by another number of processes than ``shard``'s
    (resuming would start over and lose that work; the state is per rank, so the same number resumes it);
    None where it was not, or where there is none."""
    saved = saved_world_size(path)
    if saved is None or saved == shard.world_size:
        return None
    was = "one process" if saved == 1 else f"{saved} processes"
    now = "one process" if shard.world_size == 1 else f"{shard.world_size} processes"
    how = (
        "as one process (no --world-size, no torchrun)"
        if saved == 1
        else f"with --world-size {saved} (or torchrun --nproc-per-node {saved})"
    )
    return (
        f"the saved state {os.fspath(path)!r} was written by {was} and this run has {now}: rerun {how} to resume "
        "it, or pass --overwrite (in Python: delete those files) to start over"
    )


def files_fingerprint(source: Any, content: bool = False) -> dict[str, Any] | None:
    """What the files behind ``source`` hold, for recognising the same data on resume.

    For sources with a ``files`` list (image folders): the number of files and a SHA-256 over every
    (path, size, mtime) — or, with ``content=True``, over every file's bytes (slower, catches a
    file replaced with the same size and time). None for in-memory and generated data (their
    ``describe()`` already identifies them).
    """
    files = getattr(source, "files", None)
    if files is None:
        return None
    h = hashlib.sha256()
    for f in files:
        p = os.fspath(f)
        h.update(p.encode("utf-8", "surrogateescape") + b"\0")
        if content:
            try:
                with open(p, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
            except OSError as e:
                h.update(f"unreadable:{e.errno}".encode())
        else:
            try:
                st = os.stat(p)
                h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
            except OSError as e:
                h.update(f"missing:{e.errno}".encode())
        h.update(b"\n")
    return {"n": len(files), "by": "content" if content else "size+mtime", "sha256": h.hexdigest()}


def save_state(path: str, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically with a checksum (a kill leaves the previous state intact)."""
    atomic_torch_save({**state, "format": STATE_FORMAT}, path)


def load_state(path: str, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
    """The saved state at ``path`` if it belongs to the run described by ``fingerprint``; None if absent.

    Raises ``DamagedFileError`` for a file that fails its checksum or cannot be read, and
    :class:`StateMismatchError` for the state of another run.
    """
    if not os.path.exists(path):
        return None
    state = load_verified(
        path, what="measurement state file", fix="delete it (or the state/ folder) to start the measurement over"
    )
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise StateMismatchError(
            f"{path!r} is not a measurement state file of this invfast version; delete it or "
            "choose another state path to start over"
        )
    if state.get("fingerprint") != fingerprint:
        old, new = _flat(state.get("fingerprint", {})), _flat(fingerprint)
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        raise StateMismatchError(
            f"the state file {path!r} belongs to another run (differs in: {', '.join(diff)}); "
            "use another state path / output folder, or delete it to start over"
        )
    return state


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level with dotted keys (``config.grid_size``), for naming what differs."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out
