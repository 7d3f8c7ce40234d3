"""The one base of every job's configuration (:class:`~invfast.measure.MeasureConfig`,
:class:`~invfast.pretrain.TrainConfig`, :class:`~invfast.reproduce.ReproduceConfig`).

A configuration is a frozen dataclass, validated once when it is made (``__post_init__`` checks what each
field declares, then calls :meth:`Config.validate` for what concerns several fields; each raises one clear
error naming the first bad field). Each field either changes the numbers (the default) or only schedules the
work — how, where, how often or how visibly it runs — and is declared with :func:`scheduling`, with the
reason. A resumed job must match every field that changes the numbers and may change the others
(:meth:`Config.numbers`, :meth:`Config.scheduling_fields`).

What a field accepts on its own (its type, bounds or choices), the value that gives the numbers of folders made
before it existed, the group it belongs to and, where a command sets it, its option's help are declared with it
(:func:`declare`), once: no list of field names stands beside the fields, and no command repeats them
(:mod:`invfast.runtime.options` makes a command option of each field declared with ``option``: ``batch_size``
is ``--batch-size``).

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Job(Config):
    ...     epochs: int = 10
    ...     progress: bool = scheduling("display only", True)
    >>> Job().numbers(), Job.scheduling_fields()
    ({'epochs': 10}, ('progress',))
    >>> @dataclass(frozen=True)
    ... class Run(Config):
    ...     epochs: int = declare(10, at_least=1, at_most=1000)
    ...     warmup: float = declare(0.1, number=True, before=0.0)
    >>> Run.added_fields()
    {'warmup': 0.0}
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = ["Config", "declare", "declared_problem", "scheduling"]

C = TypeVar("C", bound="Config")


def declare(
    default: Any = dataclasses.MISSING,
    *,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    number: bool = False,
    flag: bool = False,
    optional: bool = False,
    scheduling: str | None = None,
    before: Any = dataclasses.MISSING,
    group: str | None = None,
    choices: Sequence[Any] | None = None,
    option: str | None = None,
) -> Any:
    """A field and what it accepts, declared once.

    Args:
        default: its value when not given.
        at_least: an integer (a real number with ``number``) at least this (``number`` alone: at least 0).
        above: a real number greater than this (a learning rate, a temperature: above 0).
        at_most: and at most this (a run beyond it would take years or not fit in memory).
        number: a finite real number (int or float, not NaN or infinite) rather than an integer.
        flag: True or False.
        optional: None is accepted too (the job decides).
        scheduling: why it changes none of the numbers (:func:`scheduling`): left out of the resume identity.
        before: the value that gives the numbers of folders made before the field existed (a folder whose
            recorded configuration lacks it resumes under that value, and only under it).
        group: the group of related fields it belongs to (:meth:`Config.groups`).
        choices: one of these values (a name: ``'cosine'``, ``'constant'``).
        option: what the field does, in a line: a command that takes the class's options
            (:func:`invfast.runtime.options.add_config_options`) has the field's option (``batch_size``:
            ``--batch-size``) with this help, its type, bounds or choices from this declaration, and the
            field's default (a flag: the option sets True, so its default must be False).
    """
    meta: dict[str, Any] = {}
    if at_least is not None or above is not None or at_most is not None or flag or number:
        meta["accepts"] = _accepts(at_least, above, at_most, number, flag, optional)
    if choices is not None:
        meta["choices"] = tuple(choices)
        meta["optional"] = optional
    if option is not None:
        if flag and default is not False:
            raise TypeError(
                f"a flag that is a command option must default to False (the option sets True), got {default!r}"
            )
        meta["option"] = option
    if scheduling is not None:
        meta.update(numbers=False, why=scheduling)
    if before is not dataclasses.MISSING:
        meta["before"] = before
    if group is not None:
        meta["group"] = group
    return dataclasses.field(default=default, metadata=meta)


def _accepts(
    at_least: float | None, above: float | None, at_most: float | None, number: bool, flag: bool, optional: bool
) -> dict[str, Any]:
    """What a field declared with these bounds accepts (a number without a lower bound: at least 0)."""
    number = number or above is not None
    if number and at_least is None and above is None:
        at_least = 0
    kind = "flag" if flag else "number" if number else "integer"
    return {"kind": kind, "at_least": at_least, "above": above, "at_most": at_most, "optional": optional}


def scheduling(why: str, default: Any = dataclasses.MISSING) -> Any:
    """A field that changes none of the numbers, and ``why``: left out of the resume identity."""
    return declare(default, scheduling=why)


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _range(accepts: dict[str, Any]) -> str:
    """What a declaration accepts, in words: 'an integer in [1, 1024]', 'a finite number > 0', 'an integer'."""
    lo, above, hi = accepts["at_least"], accepts.get("above"), accepts["at_most"]
    what = "a finite number" if accepts["kind"] == "number" else "an integer"
    if hi is not None and lo is not None:
        return f"{what} in [{_num(lo)}, {_num(hi)}]"
    if hi is not None and above is not None:
        return f"{what} in ({_num(above)}, {_num(hi)}]"
    if lo is not None:
        return f"{what} >= {_num(lo)}"
    if above is not None:
        return f"{what} > {_num(above)}"
    return f"{what} <= {_num(hi)}" if hi is not None else what


def _problem(name: str, v: Any, accepts: dict[str, Any], none: str) -> tuple[type[Exception], str] | None:
    """What is wrong with value ``v`` of field ``name`` under its declaration ``accepts`` (None: nothing)."""
    if accepts["optional"] and v is None:
        return None
    none = none if accepts["optional"] else ""
    if accepts["kind"] == "flag":
        return None if isinstance(v, bool) else (TypeError, f"{name} must be True or False{none}, got {v!r}")
    lo, above, hi = accepts["at_least"], accepts.get("above"), accepts["at_most"]
    real = accepts["kind"] == "number"
    wrong_type = isinstance(v, bool) or not isinstance(v, (int, float) if real else int)
    if (
        wrong_type
        or (isinstance(v, float) and not math.isfinite(v))
        or (lo is not None and not v >= lo)
        or (above is not None and not v > above)
        or (hi is not None and not v <= hi)
    ):
        return ValueError, f"{name} must be {_range(accepts)}{none}, got {v!r}"
    return None


def declared_problem(name: str, v: Any, meta: Any, none: str = " (or None)") -> tuple[type[Exception], str] | None:
    """What is wrong with value ``v`` of the field declared with ``meta`` (a field's metadata), the error
    naming it ``name`` and saying ``none`` where None is accepted too (None: nothing is wrong)."""
    accepts = meta.get("accepts")
    if accepts is not None:
        problem = _problem(name, v, accepts, none)
        if problem is not None:
            return problem
    choices = meta.get("choices")
    if choices is not None and not (meta["optional"] and v is None) and v not in choices:
        none = none if meta["optional"] else ""
        return ValueError, f"{name} must be one of {', '.join(map(str, choices))}{none}, got {v!r}"
    return None


class Config:
    """Base of the job configurations: subclasses are ``@dataclass(frozen=True)`` and override
    :meth:`validate` (normalising a field through ``object.__setattr__`` where it must)."""

    #: what an unknown field is called in :meth:`replace`'s error ("measurement option", "config field")
    field_word = "field"
    #: what a bad value's error says before the field's name ("config field ": the job's other errors say so)
    value_prefix = ""

    def __post_init__(self) -> None:
        self.check_declared()
        self.validate()

    def check_declared(self) -> None:
        """Raise one error naming the first field whose value is not what it declares (:func:`declare`)."""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            problem = declared_problem(self.value_prefix + f.name, getattr(self, f.name), f.metadata)
            if problem is not None:
                raise problem[0](problem[1])

    @classmethod
    def added_fields(cls) -> dict[str, Any]:
        """The fields added after folders were made, by name, at the value that gives the numbers of before."""
        return {f.name: f.metadata["before"] for f in dataclasses.fields(cls) if "before" in f.metadata}  # type: ignore[arg-type]

    @classmethod
    def options(cls) -> tuple[dataclasses.Field, ...]:
        """The fields declared with an ``option`` (each a command option), in declaration order."""
        return tuple(f for f in dataclasses.fields(cls) if "option" in f.metadata)  # type: ignore[arg-type]

    @classmethod
    def groups(cls) -> dict[str, tuple[str, ...]]:
        """The fields declared with a ``group``, by group, in declaration order."""
        out: dict[str, list[str]] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if "group" in f.metadata:
                out.setdefault(f.metadata["group"], []).append(f.name)
        return {k: tuple(v) for k, v in out.items()}

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
