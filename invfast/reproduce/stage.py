"""A stage of ``invfast reproduce`` as data (:class:`Stage`): the pipeline (:mod:`invfast.reproduce.pipeline`)
runs the records that :data:`invfast.reproduce.stages.STAGES` lists; both import this module, neither the other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from invfast.reproduce.config import ReproduceConfig

__all__ = ["Stage"]


@dataclass(frozen=True)
class Stage:
    """One stage of the reproduce job, as data.

    Attributes:
        name: its name: the key of its result, its cache file ``<cache>/stages/<name>.json`` and its
            progress label (letters, digits, '-' and '_').
        run: ``run(ctx) -> dict``: makes the stage's outputs under ``ctx.cache`` and returns its
            JSON-able result (``ctx``: :class:`invfast.reproduce.stages.Context`).
        needs: the stages whose outputs it reads (they run first).
        writes: what it creates under the seed's cache folder (paths; a trailing '/' for a folder).
        when: ``when(cfg) -> bool``: whether this configuration runs it (None: always).
        disk_mb: ``disk_mb(cfg) -> float``: MiB it writes under the seed's cache folder (:mod:`invfast.reproduce.disk`);
            required when ``writes`` is not empty. The run's disk check sums it over the stages it selects.
    """

    name: str
    run: Callable[[Any], dict[str, Any]]
    needs: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    when: Callable[[ReproduceConfig], bool] | None = None
    disk_mb: Callable[[ReproduceConfig], float] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise ValueError(
                f"stage name must be a non-empty string of letters, digits, '-' and '_', got {self.name!r}"
            )
        if not callable(self.run):
            raise TypeError(f"stage {self.name!r}: run must be callable, got {type(self.run).__name__}")
        for field_name in ("needs", "writes"):
            v = getattr(self, field_name)
            if not isinstance(v, tuple) or not all(isinstance(x, str) and x for x in v):
                raise TypeError(f"stage {self.name!r}: {field_name} must be a tuple of non-empty strings, got {v!r}")
        if self.name in self.needs:
            raise ValueError(f"stage {self.name!r} needs itself")
        if self.when is not None and not callable(self.when):
            raise TypeError(f"stage {self.name!r}: when must be None or callable(cfg) -> bool")
        if self.disk_mb is not None and not callable(self.disk_mb):
            raise TypeError(f"stage {self.name!r}: disk_mb must be None or callable(cfg) -> float")
        if self.writes and self.disk_mb is None:
            raise ValueError(
                f"stage {self.name!r} writes {', '.join(self.writes)}: declare disk_mb(cfg), the MiB it writes "
                "(invfast.reproduce.disk), so the run's disk check counts it"
            )

    def active(self, cfg: ReproduceConfig) -> bool:
        return self.when is None or bool(self.when(cfg))
