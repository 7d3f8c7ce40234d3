"""The test-transform registry: the 18 built-ins of Ericsson et al. and a user's own, by name.

>>> from invfast import transforms as T
>>> T.TEST_TRANSFORMS                      # the 18 built-in names
>>> T.get("rotation").apply(images, T.get("rotation").grid(8))          # [B, 8, 3, H, W]
>>> T.register("gamma", grid=lambda k: torch.linspace(0.5, 2.0, k), family="appearance", identity=1.0,
...            apply=lambda x, g: x.unsqueeze(1) ** g.view(1, -1, 1, 1, 1))
>>> T.get("gamma")                         # a TestTransform like the built-ins: measure it by name

:func:`get` is the one lookup (``invfast.measure_invariance(transforms=...)`` and ``invfast measure
--transforms`` resolve names through it), so a registered transform works wherever a built-in does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from invfast.transforms.builtin import RECORDS, TEST_TRANSFORMS, Builtin
from invfast.transforms.transform import FAMILIES, TestTransform, _no_check, check_k, check_output

__all__ = [
    "family",
    "get",
    "names",
    "register",
    "unregister",
]

_BUILTIN: dict[str, TestTransform] = {}  # filled below: the 18 registered through register() like a user's
_REGISTRY: dict[str, TestTransform] = {}

#: names the transform selection reads as keywords, never as one transform
RESERVED: tuple[str, ...] = ("all",) + FAMILIES
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_PROBE_K = 8  # grid points asked for when checking a registration
_PROBE_SHAPE = (2, 3, 16, 16)


def get(name: str) -> TestTransform:
    """The test transform called ``name``: a built-in (:data:`TEST_TRANSFORMS`) or a registered one."""
    if not isinstance(name, str):
        raise TypeError(f"transform name must be a string, got {type(name).__name__}")
    if name not in _REGISTRY:
        raise ValueError(f"unknown transform {name!r}; valid names: {', '.join(names())}")
    return _REGISTRY[name]


def names() -> tuple[str, ...]:
    """Every name :func:`get` accepts: the 18 built-ins, then registered transforms in registration order."""
    return tuple(_REGISTRY)


def family(name: str) -> str:
    """'spatial' or 'appearance'."""
    return get(name).family


def register(
    name: str,
    *,
    grid: Any,
    apply: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | Builtin | None = None,
    family: str,
    identity: Any = None,
    param_dim: int | None = None,
    check: Callable[[torch.Tensor], None] | None = None,
    overwrite: bool = False,
) -> Any:
    """Register a user's own test transform under ``name`` and return it (a :class:`TestTransform`).

    Once registered, ``get(name)``, ``invfast.measure_invariance(model, data, transforms=[name])`` and
    ``invfast measure --transforms NAME`` (with the module that registers it imported, e.g. the
    ``--model module:factory`` module) measure it exactly like a built-in.

    Args:
        name: letters, digits and ``_.+-`` (no commas: CLIs split lists on them); not 'all', 'spatial' or
            'appearance'. Must not be taken (a built-in or an earlier registration) unless ``overwrite``.
        grid: ``k -> params`` (about ``k`` points, [P] or [P, m], any float array-like), or a fixed
            array-like grid returned whatever ``k``. Grids are float32 CPU tensors.
        apply: ``(images, params) -> views``: ``images`` float [B, 3, H, W] in [0, 1] (float32, or float64
            for float64 input) on the data's device, ``params`` float32 [p] or [p, m] (some rows of the
            grid) on the same device; must return floating [B, p, 3, H, W] in [0, 1] on that device (every
            parameter on every image). The registry converts back to the caller's dtype (uint8 rounded).
            Leave it out to use ``register`` as a decorator of the apply function. Or a
            :class:`~invfast.transforms.builtin.Builtin` record, which brings its own implementations (float,
            uint8, ``fill`` for uncovered pixels, the published protocol's and DALI's): the 18 built-ins are
            registered so.
        family: 'spatial' or 'appearance'.
        identity: which parameters leave images unchanged (they are left out of the invariance means):
            None (none), a value (``1.0``; m values for [P, m] grids) or ``params -> bool [P]``.
        param_dim: 1 for [P] grids, m for [P, m]; inferred from the grid when None.
        check: ``params -> None``, run on the parameters of every call (after their shape and finiteness are
            checked): raise ValueError naming the bad value (e.g. a negative factor). None: no value check.
        overwrite: replace a built-in or an earlier registration of ``name``.

    The contract is checked once here, on ``grid(8)`` and a probe batch of two 16x16 float32 images on
    the CPU, and the shape of every ``apply`` result is checked at each call. A ``Builtin`` record's
    implementations are not probed (the suite tests the built-ins'; importing invfast runs no kernel).

    Returns:
        The registered :class:`TestTransform` (or, without ``apply``, a decorator that returns it).
    """
    if apply is None:  # used as a decorator of the apply function
        options: dict[str, Any] = dict(
            grid=grid, family=family, identity=identity, param_dim=param_dim, check=check, overwrite=overwrite
        )
        return lambda fn: register(name, apply=fn, **options)
    _check_arguments(name, apply, family, param_dim, check, overwrite)
    t = _checked_transform(name, grid, apply, family, identity, param_dim, check)
    _REGISTRY[name] = t
    return t


def unregister(name: str) -> None:
    """Remove a registered transform (a built-in replaced with ``overwrite=True`` gets its built-in back)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown transform {name!r}; registered: {', '.join(names())}")
    if name in _BUILTIN:
        if _REGISTRY[name] is _BUILTIN[name]:
            raise ValueError(f"{name!r} is a built-in test transform; only registered transforms can be unregistered")
        _REGISTRY[name] = _BUILTIN[name]
        return
    del _REGISTRY[name]


# ----------------------------------------------------------------------------------------------
# registration checks


def _check_name(name: Any, overwrite: bool) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"transform name must be letters, digits and _.+- (starting with a letter or digit, no "
            f"commas or spaces), got {name!r}"
        )
    if name in RESERVED:
        raise ValueError(f"{name!r} selects a group of transforms ({', '.join(RESERVED)}); choose another name")
    if name in _REGISTRY and not overwrite:
        what = "a built-in test transform" if name in _BUILTIN else "already registered"
        raise ValueError(
            f"transform {name!r} is {what}; choose another name, or pass overwrite=True to replace it "
            "(unregister(name) removes a registration)"
        )


def _check_arguments(name: Any, apply: Any, family: Any, param_dim: Any, check: Any, overwrite: bool) -> None:
    """Check the arguments of :func:`register` that need no call of the user's code: name, family, apply,
    param_dim, check."""
    _check_name(name, overwrite)
    if family not in FAMILIES:
        raise ValueError(f"register({name!r}): family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if not (callable(apply) or isinstance(apply, Builtin)):
        raise TypeError(
            f"register({name!r}): apply must be a callable (images, params) -> [B, P, C, H, W], "
            f"got {type(apply).__name__}"
        )
    if check is not None and not callable(check):
        raise TypeError(f"register({name!r}): check must be a callable params -> None, got {type(check).__name__}")
    if param_dim is not None and (isinstance(param_dim, bool) or not isinstance(param_dim, int) or param_dim < 1):
        raise ValueError(f"register({name!r}): param_dim must be a positive int or None, got {param_dim!r}")


def _checked_transform(
    name: str,
    grid: Any,
    apply: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | Builtin,
    family: str,
    identity: Any,
    param_dim: int | None,
    check: Callable[[torch.Tensor], None] | None,
) -> TestTransform:
    """The :class:`TestTransform` of a registration (not yet registered), its grid read and every part
    probed once on ``grid(8)`` and a small CPU batch."""
    grid_fn = _grid_function(name, grid)
    probe = grid_fn(_PROBE_K)
    dim = 1 if probe.dim() == 1 else int(probe.shape[1])
    if param_dim is not None and param_dim != dim:
        raise ValueError(f"register({name!r}): param_dim={param_dim} but the grid has shape {tuple(probe.shape)}")
    t = TestTransform(
        name=name,
        family=family,
        param_dim=dim,
        _grid=_checked_grid(name, grid_fn, dim),
        _identity=_identity_function(name, identity, dim),
        _check=check or _no_check,
        _impl=apply.apply if isinstance(apply, Builtin) else None,
        _user_apply=None if isinstance(apply, Builtin) else apply,
        pixel_reference=apply.pixel_reference if isinstance(apply, Builtin) else None,
    )
    _probe(t, probe)
    return t


def _as_grid(name: str, g: Any) -> torch.Tensor:
    try:
        p = (
            g.detach().to("cpu", torch.float32)
            if isinstance(g, torch.Tensor)
            else torch.as_tensor(g, dtype=torch.float32, device="cpu")
        )
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError(
            f"transform {name!r}: the grid must be a float array [P] or [P, m], got {type(g).__name__} ({e})"
        ) from e
    if p.dim() not in (1, 2) or p.shape[0] == 0 or (p.dim() == 2 and p.shape[1] == 0):
        raise ValueError(
            f"transform {name!r}: the grid must have shape [P] or [P, m] with P, m >= 1, got {tuple(p.shape)}"
        )
    if not bool(torch.isfinite(p).all()):
        raise ValueError(f"transform {name!r}: the grid contains NaN/Inf")
    return p


def _grid_function(name: str, grid: Any) -> Callable[[int], torch.Tensor]:
    if callable(grid):
        return lambda k: _as_grid(name, grid(k))
    fixed = _as_grid(name, grid)
    return lambda k: fixed.clone()


def _checked_grid(name: str, grid_fn: Callable[[int], torch.Tensor], dim: int) -> Callable[[int], torch.Tensor]:
    def checked(k: int) -> torch.Tensor:
        p = grid_fn(check_k(k))
        if (1 if p.dim() == 1 else int(p.shape[1])) != dim:
            raise ValueError(
                f"transform {name!r}: grid({k}) has shape {tuple(p.shape)}, but the transform was "
                f"registered with {'[P]' if dim == 1 else f'[P, {dim}]'} parameters"
            )
        return p

    return checked


def _identity_function(name: str, identity: Any, dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    if identity is None:
        return lambda p: torch.zeros(p.shape[0], dtype=torch.bool, device=p.device)
    if callable(identity):

        def user(p: torch.Tensor) -> torch.Tensor:
            m = torch.as_tensor(identity(p))
            if m.shape != (p.shape[0],):
                raise ValueError(
                    f"transform {name!r}: identity(params) must return bool [P] = [{p.shape[0]}], "
                    f"got shape {tuple(m.shape)}"
                )
            return m.to(torch.bool)

        return user
    v = torch.as_tensor(identity, dtype=torch.float64, device="cpu").reshape(-1)
    if v.numel() != dim or not bool(torch.isfinite(v).all()):
        raise ValueError(
            f"transform {name!r}: identity must be None, a callable or {dim} finite number(s) "
            f"(one per parameter), got {identity!r}"
        )

    def equal(p: torch.Tensor) -> torch.Tensor:
        ref = v.to(p.device)
        close = (p.to(torch.float64).reshape(p.shape[0], -1) - ref).abs() <= 1e-6 * ref.abs().clamp_min(1.0)
        return close.all(dim=1)

    return equal


def _probe(t: TestTransform, grid: torch.Tensor) -> None:
    """One call of every part of ``t`` on a small CPU batch, with errors that say which part broke. A record's
    implementations are not called: the suite tests the built-ins', and importing invfast runs no kernel."""
    t.is_identity(grid)
    if t._user_apply is None:
        return
    params = grid[:2]
    images = torch.rand(
        _PROBE_SHAPE, generator=torch.Generator(device="cpu").manual_seed(0), dtype=torch.float32, device="cpu"
    )
    call = f"apply(images [{', '.join(map(str, _PROBE_SHAPE))}] float32, grid({_PROBE_K})[:2])"
    try:
        y = t._user_apply(images, params)
    except Exception as e:
        raise ValueError(f"register({t.name!r}): the probe call {call} failed: {type(e).__name__}: {e}") from e
    B, C, H, W = _PROBE_SHAPE
    check_output(t.name, y, (B, params.shape[0], C, H, W), images.device)


for _rec in RECORDS.values():
    register(
        _rec.name,
        grid=_rec.grid,
        apply=_rec,
        family=_rec.family,
        identity=_rec.identity,
        param_dim=_rec.param_dim,
        check=_rec.check,
    )
_BUILTIN.update(_REGISTRY)
assert tuple(_BUILTIN) == TEST_TRANSFORMS
