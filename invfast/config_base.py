"""The one base of every job's configuration (:class:`~invfast.measure.MeasureConfig`,
:class:`~invfast.pretrain.TrainConfig`, :class:`~invfast.reproduce.ReproduceConfig`).

A configuration is a frozen dataclass, validated once when it is made (``__post_init__`` calls
:meth:`Config.validate`, which raises one clear error naming the first bad field). Each field either changes
the numbers (the default) or only schedules the work — how, where, how often or how visibly it runs — and is
declared with :func:`scheduling`, with the reason. A resumed job must match every field that changes the
numbers and may change the others (:meth:`Config.numbers`, :meth:`Config.scheduling_fields`).

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Job(Config):
    ...     epochs: int = 10
    ...     progress: bool = scheduling("display only", True)
    >>> Job().numbers(), Job.scheduling_fields()
    ({'epochs': 10}, ('progress',))
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["Config", "scheduling"]

C = TypeVar("C", bound="Config")


def scheduling(why: str, default: Any = dataclasses.MISSING) -> Any:
    """A field that changes none of the numbers, and ``why``: left out of the resume identity."""
    return dataclasses.field(default=default, metadata={"numbers": False, "why": why})


class Config:
    """Base of the job configurations: subclasses are ``@dataclass(frozen=True)`` and override
    :meth:`validate` (normalising a field through ``object.__setattr__`` where it must)."""

    #: what an unknown field is called in :meth:`replace`'s error ("measurement option", "config field")
    field_word = "field"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise one error naming the first field whose value is out of its range or of the wrong type."""

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Every field, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def scheduling_fields(cls) -> tuple[str, ...]:
        """The fields declared with :func:`scheduling`: a resumed job may change them."""
        return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get("numbers", True))  # type: ignore[arg-type]

    def numbers(self) -> dict[str, Any]:
        """Every field that changes the numbers, by name: what a resumed job must match."""
        skip = set(self.scheduling_fields())
        return {k: getattr(self, k) for k in self.field_names() if k not in skip}

    def replace(self: C, **changes: Any) -> C:
        """A copy with ``changes`` applied (validated again); unknown names raise one TypeError."""
        names = self.field_names()
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise TypeError(f"unknown {self.field_word}(s) {unknown}; {type(self).__name__} has {sorted(names)}")
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]
