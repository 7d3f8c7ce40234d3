"""The test transforms as Ericsson et al.'s (2021) published evaluation code applies them.

Used by ``protocol="ericsson"`` (:mod:`invfast.measure.protocol`); invfast's own registry
(:mod:`invfast.transforms.registry`) stays the default. The original is
github.com/linusericsson/ssl-invariances, ``eval_synthetic_invariance.py`` (``ManualTransform``): each
transform is a ``torchvision.transforms.functional`` call (torchvision 0.10, Pillow 8.1) on the PIL image
as loaded, then ``Resize(resize)`` + ``CenterCrop(crop)`` (256, 224) -- except ``resized_crop``, which
is resized straight to ``crop x crop``. Fourteen transforms differ from the registry:

=========== ========== ===========================================================================
name        params     what the original code does
=========== ========== ===========================================================================
crop        [P, 4]     ``TF.resized_crop(img, top, left, height, width, (crop, crop))``: the box in
                       **pixels of the image as loaded** (top, left in ``linspace(0, 0.25, n)·resize``,
                       height, width in ``linspace(0.75, 0.25, n)·resize``, n = int(k^¼)); PIL rounds
                       the box corners (half to even) and pads outside the image with 0; the crop is
                       resized (bilinear, antialiased) to crop x crop with **no** Resize + CenterCrop
scale       [P]        ``TF.affine(scale=s, shear=1)``: zoom about the centre with a 1° x-shear,
                       s in ``linspace(0.25, 2, k)`` (float32)
shear       [P, 2]     ``TF.affine(shear=(sx, sy))``, ``linspace(-160, 160, n + 1)[:n]`` per axis
rotation    [P]        ``TF.rotate(angle)`` = Pillow ``Image.rotate``, ``linspace(0, 360, k + 1)[:k]``
translation [P, 2]     ``TF.affine(translate=(x, y), shear=1)``: shift in pixels with a 1° x-shear, per
                       axis ``linspace(-s, s, n + 1)[:n]``, s = (resize - crop) / 2 (-16..14 px, step 2)
blur        [P]        Gaussian of std sigma on a fixed 23-tap kernel (taps -11..11, reflect
                       padding): its effective std saturates at sqrt((23²-1)/12) ≈ 6.6 px; as torchvision
                       0.10 runs it on a PIL image: the float 0..1 blur **truncated** to uint8
                       (``to_pil_image``'s ``mul(255).byte()``; ``blur_rounding="round"``: 0.29's rounding)
posterize   [P]        bits 1..7 (7 views; no identity view in the grid)
deform      [P, 2]     (sigma, draw): albumentations 1.0.3 ``ElasticTransform(sigma=σ, approximate=True)``
                       (:mod:`invfast.transforms.ericsson_elastic`); sigma in ``int(linspace(10, 50, 8))``
                       tiled over the grid; ``draw`` seeds the randomness
grayscale,  [P]        Pillow's uint8 arithmetic (:func:`invfast.ops.pillow.pillow_colour`): ``ImageEnhance``
brightness,            blends truncated to uint8, contrast's grey the integer ``int(mean(L) + 0.5)``,
contrast,              ``convert("L")``'s fixed-point luma, hue shifted by ``int(255 shift)`` steps of the
saturation,            uint8 hue of ``convert("HSV")``; grids ``linspace`` in float32 (hue ``(-0.5, 0.5)``,
hue, sharpness         factors ``(0.25, 5)``, sharpness ``(1, 30)``); float images: the registry's float ops
=========== ========== ===========================================================================

Resampling of scale, shear, rotation and translation is **nearest**, torchvision's default for PIL
images: Pillow's ``Image.transform(size, AFFINE, data, NEAREST)`` with torchvision's inverse matrix
(``_get_inverse_affine_matrix``, centre ``(W/2, H/2)`` in corner coordinates), or ``Image.rotate``'s
own matrix, reproduced bit for bit by :func:`invfast.ops.pillow.pillow_affine_nearest`; fill 0.

Every other name is the registry's transform. Randomness of ``deform`` comes from
``torch.Generator().manual_seed(seed * 1_000_003 + draw)`` (CPU, float64), moved to the data's
device, so a seed gives the same views on every device; the original draws fresh numbers for every
image and call, here every grid point has its own draw shared by all images.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from invfast.transforms import registry
from invfast.transforms._checks import as_images
from invfast.transforms.builtin import RECORDS
from invfast.transforms.ericsson_ops import BLUR_ROUNDINGS, Published
from invfast.transforms.transform import TestTransform

__all__ = ["ERICSSON_CHANGED", "EricssonTransform", "get"]

#: the transforms the published code applies differently from the registry (each record's ``published``)
ERICSSON_CHANGED: tuple[str, ...] = tuple(n for n, r in RECORDS.items() if r.published is not None)


@dataclass(frozen=True)
class EricssonTransform:
    """A test transform as the original evaluation code applies it (same interface as
    :class:`invfast.transforms.transform.TestTransform`: ``grid``, ``is_identity``, ``apply``), by its
    record's :class:`~invfast.transforms.ericsson_ops.Published`.

    Attributes:
        resize, crop: the original's Resize + CenterCrop sizes: they set the translation range and the crop
            boxes (pixels), and ``crop`` is the side of the crop transform's views.
        blur_rounding: how blur's uint8 views become bytes: ``"truncate"`` (torchvision 0.10, which the original
            pins: ``to_pil_image``'s ``mul(255).byte()``) or ``"round"`` (torchvision 0.29: half to even).
    """

    __test__ = False

    name: str
    family: str
    seed: int = 0
    resize: int = 256
    crop: int = 224
    blur_rounding: str = "truncate"

    @property
    def builtin(self) -> TestTransform:
        """The registry's transform of the same name."""
        return registry.get(self.name)

    @property
    def published(self) -> Published:
        """How the published code applies this transform (its record's ``published``)."""
        rec = RECORDS[self.name].published
        if rec is None:
            raise KeyError(f"{self.name}: the published code applies it as the registry does; use registry.get")
        return rec

    @property
    def param_dim(self) -> int:
        """1 for [P] parameters, m for [P, m] (the published grid's)."""
        return self.published.param_dim

    @property
    def includes_preprocessing(self) -> bool:
        """The views come out at the model's input size (crop x crop): the original's ``resized_crop`` is
        not followed by Resize + CenterCrop."""
        return self.published.at_model_size

    def grid(self, k: int = 256) -> torch.Tensor:
        return self.published.grid(k, self.resize, self.crop)

    def _params(self, params: Any) -> torch.Tensor:
        if self.published.builtin_units:
            return self.builtin._params(params).to("cpu")
        p = torch.as_tensor(params, dtype=torch.float32, device="cpu")
        m = self.param_dim
        if m > 1 and p.dim() == 1 and p.shape[0] == m:
            p = p.reshape(1, m)
        if m == 1 and p.dim() == 0:
            p = p.reshape(1)
        if p.dim() != (1 if m == 1 else 2) or (m > 1 and p.shape[1] != m) or not p.shape[0]:
            raise ValueError(
                f"{self.name} (ericsson protocol): params must have shape "
                f"{'[P]' if m == 1 else f'[P, {m}]'}, got {tuple(p.shape)}"
            )
        if not bool(torch.isfinite(p).all()):
            raise ValueError(f"{self.name}: params contain NaN/Inf")
        self.published.check(p)
        return p

    def is_identity(self, params: Any) -> torch.Tensor:
        """bool [P]: rotation by a multiple of 360°, shear (0, 0) and posterize 8 are copies; the 1° shear makes
        no scale/translation view an identity, no crop view is one (every box is resized); blur is one when the
        kernel's off-centre weights vanish (sigma < 0.135 px); deform never is; the colour transforms as the
        registry's."""
        p = self._params(params)
        if self.published.builtin_units:
            return self.builtin.is_identity(p)
        return self.published.identity(p)

    def apply(self, images: torch.Tensor, params: Any, fill: Any = 0.0) -> torch.Tensor:
        """[B, 3, H, W] uint8 or float images -> [B, P, 3, H, W] in their dtype ([B, P, 3, crop, crop] for
        the crop transform)."""
        images = as_images(images)
        return self.published.apply(self, images, self._params(params), fill)

    def __call__(self, images: torch.Tensor, params: Any, fill: Any = 0.0) -> torch.Tensor:
        return self.apply(images, params, fill)


def get(name: str, seed: int = 0, resize: int = 256, crop: int = 224, blur_rounding: str = "truncate") -> Any:
    """The transform called ``name`` under the original protocol: an :class:`EricssonTransform` for the names
    in :data:`ERICSSON_CHANGED`, the registry's transform otherwise. ``resize``, ``crop``: the protocol's
    Resize + CenterCrop sizes; ``blur_rounding``: blur's bytes as torchvision 0.10 (``"truncate"``, the pinned
    version) or 0.29 (``"round"``) makes them."""
    t = registry.get(name)
    if blur_rounding not in BLUR_ROUNDINGS:
        raise ValueError(f"blur_rounding must be one of {', '.join(BLUR_ROUNDINGS)}, got {blur_rounding!r}")
    if name not in ERICSSON_CHANGED:
        return t
    if crop > resize:
        raise ValueError(f"crop ({crop}) must not exceed resize ({resize})")
    return EricssonTransform(
        name=name,
        family=t.family,
        seed=seed,
        resize=int(resize),
        crop=int(crop),
        blur_rounding=blur_rounding,
    )
