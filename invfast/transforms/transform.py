"""A test transform: a named parameter grid and a batched ``apply`` (every parameter on every image).

The 18 built-in transforms (:mod:`invfast.transforms.builtin`) and a user's own
(:func:`invfast.transforms.register`) are both :class:`TestTransform` objects, so everything that takes
one (``invfast.measure_invariance``, the contact sheet, the pretraining invariance views) takes either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from invfast._validate import check_finite
from invfast.transforms import functional as Fn
from invfast.transforms._checks import as_images

__all__ = ["FAMILIES", "Impl", "check_k", "TestTransform", "check_output"]

#: the families a test transform belongs to (Ericsson et al.: spatial vs appearance invariance)
FAMILIES: tuple[str, ...] = ("spatial", "appearance")

#: built-in implementation: (transform, checked images, checked params [P] / [P, m], fill) -> [B, P, C, H, W]
Impl = Callable[["TestTransform", torch.Tensor, torch.Tensor, Any], torch.Tensor]


def check_k(k: int) -> int:
    """``k`` (number of grid points) if it is a positive int, else ValueError."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (number of grid points) must be a positive int, got {k!r}")
    return k


def _no_check(p: torch.Tensor) -> None:
    return None


@dataclass(frozen=True)
class TestTransform:
    """One test transformation: its parameter grid and a batched ``apply``.

    Attributes:
        name: registry name (:func:`invfast.transforms.get` finds it).
        family: 'spatial' or 'appearance' (:data:`FAMILIES`).
        param_dim: 1 for scalar parameters ([P]), m for vector ones ([P, m]).
        seed, alpha: elastic deformation only: noise seed and RMS displacement as a fraction of the
            shorter image side.
        builtin: one of the 18 transforms of Ericsson et al. (False: registered by a user).
        pixel_reference: the image side (px) the grid's values are pixel distances for (224 for translation,
            blur and deform; None: the grid does not depend on the image size).
    """

    __test__ = False  # not a pytest class

    name: str
    family: str
    param_dim: int
    _grid: Callable[[int], torch.Tensor] = dataclasses.field(repr=False, compare=False)
    _identity: Callable[[torch.Tensor], torch.Tensor] = dataclasses.field(repr=False, compare=False)
    _check: Callable[[torch.Tensor], None] = dataclasses.field(repr=False, compare=False, default=_no_check)
    _impl: Impl | None = dataclasses.field(repr=False, compare=False, default=None)
    _user_apply: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = dataclasses.field(
        repr=False, compare=False, default=None
    )
    seed: int = 0
    alpha: float = 0.04
    pixel_reference: int | None = None

    @property
    def builtin(self) -> bool:
        return self._user_apply is None

    def grid(self, k: int = 256) -> torch.Tensor:
        """The parameter grid with about ``k`` points: float32 [P] or [P, param_dim] on the CPU.

        Built-ins: binary transforms (flips, grayscale, invert, equalize) give [0, 1] and posterize [1..8]
        whatever ``k``; crop uses round(k^(1/4)) values per axis, shear/translation round(sqrt(k)).
        """
        return self._grid(check_k(k))

    def is_identity(self, params: Any) -> torch.Tensor:
        """bool [P]: which parameters leave every image unchanged."""
        return self._identity(self._params(params))

    def _params(self, params: Any) -> torch.Tensor:
        p = (
            params.to(torch.float32)
            if isinstance(params, torch.Tensor)
            else torch.as_tensor(params, dtype=torch.float32, device="cpu")
        )
        if self.param_dim == 1:
            if p.dim() == 0:
                p = p.reshape(1)
            if p.dim() != 1:
                raise ValueError(f"{self.name}: params must be 1-D [P], got shape {tuple(p.shape)}")
        else:
            if p.dim() == 1 and p.shape[0] == self.param_dim:
                p = p.reshape(1, -1)
            if p.dim() != 2 or p.shape[1] != self.param_dim:
                raise ValueError(f"{self.name}: params must have shape [P, {self.param_dim}], got {tuple(p.shape)}")
        if p.shape[0] == 0:
            raise ValueError(f"{self.name}: params is empty; pass at least one parameter (see .grid())")
        check_finite(p, f"{self.name}: params contain NaN/Inf")
        self._check(p)  # value checks through _checks.require: in-graph asserts under torch.compile
        return p

    def apply(self, images: torch.Tensor, params: Any, fill: float | Sequence[float] = 0.0) -> torch.Tensor:
        """Every parameter applied to every image.

        Args:
            images: [B, 3, H, W] uint8 (0..255) or floating (0..1).
            params: [P] or [P, param_dim] (see the module docstring of :mod:`invfast.transforms.builtin`
                for the built-ins' units).
            fill: built-in geometric transforms only: value(s) in 0..1 units for pixels mapped from outside.

        Returns:
            [B, P, 3, H, W] with the dtype of ``images``, on their device.
        """
        images = as_images(images)
        p = self._params(params)
        if self._user_apply is not None:
            return self._apply_user(images, p, fill)
        assert self._impl is not None, f"{self.name}: a built-in transform without an implementation"
        return self._impl(self, images, p, fill)

    def _apply_user(self, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
        """A registered transform: float images in [0, 1] and params on the images' device in, the
        contract checked on the way out, the images' dtype back (uint8 rounded, floats clamped to [0, 1])."""
        if not (isinstance(fill, (int, float)) and float(fill) == 0.0):
            raise ValueError(
                f"{self.name}: fill is only for the built-in geometric transforms; "
                "a registered transform handles its own borders"
            )
        x = Fn.to_float(images)
        assert self._user_apply is not None
        y = self._user_apply(x, p.to(images.device))
        B, C, H, W = images.shape
        check_output(self.name, y, (B, p.shape[0], C, H, W), images.device)
        return Fn.from_float(y, images.dtype)

    def __call__(self, images: torch.Tensor, params: Any, fill: float | Sequence[float] = 0.0) -> torch.Tensor:
        return self.apply(images, params, fill)


#: how far a registered transform's output may stray outside [0, 1] (float rounding)
_SLACK = 1e-4


def check_output(name: str, y: Any, shape: tuple[int, ...], device: torch.device) -> None:
    """ValueError/TypeError unless a registered transform's output ``y`` is a floating tensor of ``shape``
    ([B, P, C, H, W]) on ``device`` holding finite values in [0, 1]."""
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"transform {name!r}: apply must return a torch.Tensor [B, P, C, H, W], got {type(y).__name__}")
    if tuple(y.shape) != tuple(shape):
        raise ValueError(
            f"transform {name!r}: apply returned shape {tuple(y.shape)}, expected [B, P, C, H, W] = "
            f"{list(shape)} (every parameter applied to every image, the images' size kept)"
        )
    if not y.is_floating_point():
        raise TypeError(f"transform {name!r}: apply must return floating images in [0, 1], got {y.dtype}")
    if y.device != device:
        raise ValueError(
            f"transform {name!r}: apply returned a tensor on {y.device}, expected the images' device {device}"
        )
    # the views must be images: NaN would become black and values outside [0, 1] would be clamped to black or
    # white without a word (one reduction per call; a little slack for float rounding)
    if not y.numel():
        return
    lo, hi = (float(v) for v in torch.aminmax(y.detach().float().nan_to_num(nan=-1e9)))
    if lo < -_SLACK or hi > 1 + _SLACK:
        bad = "NaN" if lo == -1e9 else f"values from {lo:.4g} to {hi:.4g}"
        raise ValueError(
            f"transform {name!r}: apply returned {bad}; it must return images in [0, 1] "
            "(clamp them, e.g. y.clamp(0, 1), and keep them finite)"
        )
