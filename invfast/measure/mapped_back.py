"""tmeasures's same-equivariance, streamed: the per-unit moments of a layer's feature maps after each view's maps
are brought back to the image's frame by the transform's forward map (:func:`invfast.measure.equivariance.
back_maps`), merged like the normalized variance's (:func:`invfast.ops.invariance.merge_unit_moments_`).

It is measured with ``equivariance=True`` and ``units='elements'`` for the built-in affine transforms (crop, flips,
scale, shear, rotation, translation) at layers with ``[C, H, W]`` feature maps, when the transform's view is the
model's input (no ``crop``, no resize after the transform as ``protocol='ericsson'`` does). The maps are resampled
bilinearly with zeros outside (tmeasures pads with the border value): exact for flips and 90° rotations of square
maps, within resampling otherwise.
"""

from __future__ import annotations

from typing import Any

import torch

from invfast.measure.equivariance import back_maps
from invfast.measure.units import sample_std
from invfast.ops.augment import warp_affine
from invfast.ops.invariance import merge_moments, merge_unit_moments_, moments

__all__ = ["MappedBack", "KEYS"]

#: the accumulators of a layer: per view the moments over images ([V, U]), and the view standard deviations
#: (ddof 1) of every image summed over images ([U])
KEYS = ("se_mean", "se_m2", "se_ts")


class MappedBack:
    """The same-equivariance of one transform's pass: where it applies, the sampling maps, and the per-chunk and
    per-group updates of a layer's accumulators (``la``, kept with the pass's other accumulators)."""

    def __init__(self, run: Any, t: Any, params: torch.Tensor) -> None:
        from invfast.transforms.builtin import RECORDS

        rec = RECORDS.get(t.name) if getattr(t, "builtin", False) else None
        self.affine = rec.affine if rec is not None else None
        self.active = bool(
            run.cfg.equivariance
            and run.extract.elements
            and self.affine is not None
            and run.post is None
            and run.cfg.crop is None
        )
        self.params = params.detach().cpu()
        self.name = t.name
        self.device = run.device
        self._back: dict[tuple[int, ...], torch.Tensor] = {}

    def maps(self, image_hw: tuple[int, int], map_hw: tuple[int, int]) -> torch.Tensor:
        """[P, 2, 3] float64 on the device: the back maps of every parameter for this image and map size."""
        key = (*image_hw, *map_hw)
        if key not in self._back:
            from invfast.transforms.affine import affine_maps

            assert self.affine is not None
            matrix = affine_maps(self.affine, self.params, *image_hw)
            self._back[key] = back_maps(matrix, image_hw, map_hw).to(self.device)
        return self._back[key]

    def applies(self, shape: tuple[int, ...] | None) -> bool:
        """Whether a layer whose activations per image have ``shape`` is measured."""
        return self.active and shape is not None and len(shape) == 3

    def chunk(
        self,
        la: dict[str, Any],
        group: dict[str, torch.Tensor],
        units: torch.Tensor,
        shape: tuple[int, ...],
        image_hw: tuple[int, int],
        ps: int,
        n_views: int,
        count: int,
    ) -> None:
        """Map the views ``ps ..`` of a chunk back (``units [b, c, C*H*W]``) and merge their moments into the
        group's per-image moments (``group['mean']``, ``group['m2']`` of ``n_views`` views) and the layer's per-view
        moments (of ``count`` images)."""
        b, c, n = units.shape
        if "se_mean" not in la:
            views = la["u_mean"].shape[0]
            for k, rows in (("se_mean", views), ("se_m2", views), ("se_ts", 0)):
                size = (rows, n) if rows else (n,)
                la[k] = torch.zeros(size, dtype=torch.float64, device=units.device)
        if "mean" not in group:
            group["mean"] = torch.zeros(b, n, dtype=torch.float64, device=units.device)
            group["m2"] = torch.zeros_like(group["mean"])
        back = self.maps(image_hw, (shape[1], shape[2]))
        fill = torch.zeros(shape[0], dtype=torch.float64, device="cpu")  # numbers the warp reads on the host
        maps = units.view(b, c, *shape)
        mapped = torch.cat(
            [
                warp_affine(maps[:, j].contiguous(), back[ps + j : ps + j + 1], shape[1], shape[2], fill)
                for j in range(c)
            ],
            dim=1,
        )
        merge_unit_moments_(
            mapped.view(b, c, n),
            group["mean"],
            group["m2"],
            n_views,
            la["se_mean"][ps : ps + c],
            la["se_m2"][ps : ps + c],
            count,
        )

    @staticmethod
    def start_group(u_ref: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """A group's per-image moments over its views, starting from the reference view when the grid has no
        identity (``u_ref [b, U]``: the image itself, in its own frame already)."""
        if u_ref is None:
            return {}
        return {"mean": u_ref.clone(), "m2": torch.zeros_like(u_ref)}

    @staticmethod
    def finish(
        la: dict[str, Any], group: dict[str, torch.Tensor], u_ref: torch.Tensor | None, p: int, views: int, count: int
    ) -> None:
        """Fold a finished group into the layer: the reference view's moments over images (when it was added) and
        each image's standard deviation over its mapped-back views."""
        if "se_mean" not in la or "m2" not in group:
            return
        if u_ref is not None:
            merge_moments(count, la["se_mean"][p], la["se_m2"][p], u_ref.shape[0], *moments(u_ref, 0))
        la["se_ts"] += sample_std(group["m2"], views).sum(0)
