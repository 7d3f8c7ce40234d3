"""Transforms-2D (Speicher et al.): one prototype object per class, transformed and alpha-composited
onto a random background; every sample is a pure function of (seed, split, index).

The dataset class and its rendering; :mod:`invfast.synthetic.inputs` validates what it accepts and
:mod:`invfast.synthetic.placement` builds the object's linear map and position."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from invfast.ops import synth as synth_ops
from invfast.ops.kernels import gaussian_taps
from invfast.ops.synth import COLOR_FLAGS, composite
from invfast.ops.synth_reference import premultiply, unpremultiply
from invfast.synthetic import ops2d, rng
from invfast.synthetic.banks import bank_checksum
from invfast.synthetic.inputs import (
    DEFAULT_SIZES,
    RANDOM_BACKGROUNDS,
    as_backgrounds,
    as_indices,
    as_objects,
    as_order,
    check_int,
)
from invfast.synthetic.placement import (
    LINEAR_GEOMETRIC,
    alpha_box,
    box_corners,
    canonical_linear,
    placement,
    type_matrix,
)
from invfast.synthetic.recipe import BINARY, GEOMETRIC, PARAM_NAMES, Recipe, canonical, sample

#: generator version, recorded as ``format_version`` in every config/fingerprint (the manifest file format is
#: ``storage.FORMAT_VERSION``): 2 = centre kept inside the image for boxes longer than the image (those draws
#: changed), so a dataset materialised by version 1 is not taken for the same one
GENERATOR_VERSION = 2
#: the order of application with ``order='canonical'`` (colour types fused in one pass; the geometric
#: types fused in one warp that also places the object; noise on the placed object)
CANONICAL_ORDER: tuple[str, ...] = (
    "hue",
    "brightness",
    "contrast",
    "grayscale",
    "posterize",
    "invert",
    "sharpen",
    "blur",
    "pixelate",
    "elastic",
    "erasing",
    "hflip",
    "vflip",
    "shear",
    "scale",
    "rotate",
    "translate",
    "noise",
)
_CHUNK_PER_THREAD = 256  # samples per thread rendered together: intermediates stay in cache

Batch = tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]


class Transforms2D(torch.utils.data.Dataset):
    """A Transforms-2D dataset: random access by index, reproducible across batches and workers.

    Args:
        objects: int (the first that many built-in objects), list of built-in object indices,
            an :class:`ObjectBank`, or a folder in the SI-score layout. Object ``i`` is class ``i``.
        transforms: transformation types (names from ``TRANSFORMATION_TYPES`` or 'rotate,hue,blur');
            all are applied to every sample (the order they are listed in does not matter).
        size: image side in pixels.
        n: number of samples (default 50 000 / 10 000 / 10 000 for train / val / test).
        seed: dataset seed. ``split`` keys an independent stream, so splits never share samples.
        backgrounds: None (built-in), a folder, an image tensor/array, or 'uniform-random'
            (a fresh uniform-random background per sample).
        n_classes: use only the first ``n_classes`` objects (error if the bank has fewer).
        recipe: distribution constants (:class:`Recipe`, Speicher et al.'s published values by default).
        order: ``'canonical'`` (default): every sample in one fixed order of the types (see
            ``docs/synthetic.md``); ``'random'``: each sample in its own random order, a pure function of
            (seed, split, index) like everything else; or a sequence of the dataset's type names (or
            'hue,rotate,...'), each once: that order for every sample, as the original applies its list.
            :meth:`orders` lists the order of any sample.

    ``ds[idx]`` -> (image float32 [3, size, size] in [0, 1], label int, params dict[str, float]).
    Params are the latent factors (``PARAM_NAMES``): object centre ``x, y`` (fraction of the image
    side, 0 = left/top), ``angle`` (degrees, counter-clockwise), ``scale``, ``shear_x/y`` (degrees),
    ``hue`` (shift), ``brightness``/``contrast`` (factors), ``blur_sigma`` (px), 0/1 flags of the
    binary types, ``erase_x/y`` and the ``background`` index; identity values where not applied.
    """

    def __init__(
        self,
        objects: Any = 61,
        transforms: Any = (),
        size: int = 32,
        n: int | None = None,
        seed: int = 0,
        split: str = "train",
        backgrounds: Any = None,
        n_classes: int | None = None,
        recipe: Recipe | None = None,
        order: str = "canonical",
    ):
        size = check_int("size", size)
        if not isinstance(split, str) or not split:
            raise ValueError(f"split must be a non-empty string, got {split!r}")
        if n is None:
            if split not in DEFAULT_SIZES:
                raise ValueError(f"n is required for split {split!r} (defaults exist for {sorted(DEFAULT_SIZES)})")
            n = DEFAULT_SIZES[split]
        n = check_int("n", n)
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        seed = check_int("seed", seed)
        self.transforms = canonical(transforms)
        self.order = as_order(order, self.transforms)
        self.size = int(size)
        self.n = int(n)
        self.seed = int(seed)
        self.split = split
        self.recipe = recipe or Recipe()
        self.objects = as_objects(objects, n_classes)
        self.backgrounds = as_backgrounds(backgrounds, self.size)
        self._canvases = self.objects.canvases(self.size, self.recipe.fill)

    # ------------------------------------------------------------------ Dataset protocol
    def __len__(self) -> int:
        return self.n

    @property
    def num_classes(self) -> int:
        return len(self.objects)

    @property
    def classes(self) -> list[str]:
        return list(self.objects.names)

    def __getitem__(self, idx: int):
        if isinstance(idx, (torch.Tensor, np.integer)):
            idx = int(idx)
        if not isinstance(idx, int):
            raise TypeError(f"index must be an int, got {type(idx).__name__}")
        if idx < 0:
            idx += self.n
        images, labels, params = self.generate([idx])
        return images[0].to(torch.float32) / 255.0, int(labels[0]), {k: float(v[0]) for k, v in params.items()}

    def __getitems__(self, indices: Sequence[int]) -> list:
        """Batched fetch used by DataLoader: the same samples as ``[self[i] for i in indices]``."""
        images, labels, params = self.generate(indices)
        x = images.to(torch.float32) / 255.0
        return [(x[j], int(labels[j]), {k: float(v[j]) for k, v in params.items()}) for j in range(len(labels))]

    # ------------------------------------------------------------------ generation
    def generate(self, indices: Iterable[int], view: int = 0) -> Batch:
        """Samples at ``indices``: (images uint8 [B, 3, size, size], labels int64 [B],
        params dict[str, float64 Tensor [B]]). Independent of batch composition and order.

        ``view`` > 0 gives another view of the same samples: the same object and background, every
        transformation drawn anew (from a stream keyed by the view), for pairs that differ only in
        their transformation (Speicher et al.'s sensitivity). ``view=0`` is the dataset itself."""
        out = self._chunked(indices, view, layers=False)
        return out[0], out[1], out[2]

    def generate_layers(
        self, indices: Iterable[int], view: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The samples of :meth:`generate` before compositing: (objects float32 [B, 4, size, size], the
        transformed object as premultiplied RGBA in [0, 1]; backgrounds uint8 [B, 3, size, size], each sample's
        own; labels int64 [B]; params). ``invfast.ops.synth.composite(objects, backgrounds, arange(B))`` is
        :meth:`generate`'s images byte for byte; another background behind the same object is a view in which
        the background tells nothing about the sample."""
        out = self._chunked(indices, view, layers=True)
        return out[0], out[3], out[1], out[2]

    def _chunked(self, indices: Iterable[int], view: int, layers: bool) -> tuple[Any, ...]:
        idx = as_indices(indices, self.n)
        view = check_int("view", view)
        keys = rng.sample_keys(self.seed, self.split, idx)
        chunk = _CHUNK_PER_THREAD * max(1, torch.get_num_threads())
        if idx.size <= chunk:
            return self._render(keys, view=view, layers=layers)
        # cache-sized chunks: samples are batch-independent, so chunking changes no byte
        parts = [self._render(keys[c0 : c0 + chunk], view=view, layers=layers) for c0 in range(0, idx.size, chunk)]
        params = {k: torch.cat([p[2][k] for p in parts]) for k in PARAM_NAMES}
        images, labels = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        if layers:
            return images, labels, params, torch.cat([p[3] for p in parts])
        return images, labels, params

    def _render(
        self, keys: np.ndarray, labels: np.ndarray | None = None, view: int = 0, layers: bool = False
    ) -> tuple[Any, ...]:
        B, S, rec = keys.shape[0], self.size, self.recipe
        if labels is None:
            labels = rng.integers(keys, "object", self.num_classes)
        # object and background come from the sample's keys, its transformations from the view's
        tkeys = keys if view == 0 else rng.stream_bits(keys, f"view/{view}")
        p = sample(tkeys, self.transforms, rec)
        pm = self._canvases.index_select(0, torch.from_numpy(labels))
        if B == 0:
            empty = (
                torch.zeros(0, 4 if layers else 3, S, S, dtype=torch.float32 if layers else torch.uint8),
                torch.zeros(0, dtype=torch.int64),
                {k: torch.zeros(0, dtype=torch.float64) for k in PARAM_NAMES},
            )
            return (*empty, torch.zeros(0, 3, S, S, dtype=torch.uint8)) if layers else empty
        if self.order != "canonical":
            pm = self._transform_in_order(pm, tkeys, p)
        else:
            pm = self._transform_canonical(pm, tkeys, p)
        if isinstance(self.backgrounds, str):
            px = rng.uniform(keys, "background-pixels", 3 * S * S)
            bgs = torch.from_numpy(np.minimum(np.floor(px * 256.0), 255).astype(np.uint8).reshape(B, 3, S, S))
            bg_idx = torch.arange(B)
            p["background"] = np.full(B, -1.0)
        else:
            bgi = rng.integers(keys, "background", self.backgrounds.shape[0])
            bgs, bg_idx = self.backgrounds, torch.from_numpy(bgi)
            p["background"] = bgi.astype(np.float64)
        params = {k: torch.from_numpy(np.ascontiguousarray(p[k], dtype=np.float64)) for k in PARAM_NAMES}
        lab = torch.from_numpy(labels.astype(np.int64))
        if layers:
            return pm.contiguous(), lab, params, bgs.index_select(0, bg_idx)
        return composite(pm.contiguous(), bgs, bg_idx), lab, params

    def _transform_canonical(self, pm: torch.Tensor, keys: np.ndarray, p: dict[str, np.ndarray]) -> torch.Tensor:
        """The fixed order: colour (fused), sharpen, blur, pixelate, elastic, erasing in the object's frame,
        one fused affine warp (flip, shear, scale, rotate, then placement), noise on the placed object."""
        B, rec, T = keys.shape[0], self.recipe, set(self.transforms)
        colour = [t for t in COLOR_FLAGS if t in T]
        if colour:
            flags = np.zeros(B, np.int64)
            for t in colour:
                on = p[t] > 0.5 if t in ("grayscale", "posterize", "invert") else np.ones(B, bool)
                flags |= np.where(on, COLOR_FLAGS[t], 0)
            pm = synth_ops.color(
                pm,
                torch.from_numpy(p["hue"]),
                torch.from_numpy(p["brightness"]),
                torch.from_numpy(p["contrast"]),
                torch.from_numpy(flags),
                rec.posterize_bits,
            )
        for t in ("sharpen", "blur", "pixelate", "elastic", "erasing"):
            if t in T:
                pm = self._apply_local(t, pm, np.ones(B, bool) if t == "blur" else p[t] > 0.5, keys, p)
        if T & set(GEOMETRIC):
            pm = self._place(pm, keys, p, canonical_linear(p))
        if "noise" in T:
            pm = self._apply_local("noise", pm, p["noise"] > 0.5, keys, p)
        return pm

    def _transform_in_order(self, pm: torch.Tensor, keys: np.ndarray, p: dict[str, np.ndarray]) -> torch.Tensor:
        """Each sample's types in its own order (:meth:`orders`: random or a given one). Consecutive linear geometric
        types (rotate, scale, shear, flips; about the object's centre) are fused into one warp, made before
        the next non-geometric type; translate is the final placement of the transformed object (as in
        the canonical order), wherever it falls in the order."""
        B, rec = keys.shape[0], self.recipe
        perm = self._order_indices(keys)
        L = np.broadcast_to(np.eye(2), (B, 2, 2)).copy()
        pending = np.zeros(B, bool)
        for step in range(perm.shape[1]):
            for j, t in enumerate(self.transforms):
                sel = perm[:, step] == j
                if not sel.any() or t == "translate":
                    continue
                if t in LINEAR_GEOMETRIC:
                    L[sel] = np.einsum("bij,bjk->bik", type_matrix(t, p, sel), L[sel])
                    pending |= sel
                    continue
                on = sel & (p[t] > 0.5) if t in BINARY else sel
                if not on.any():
                    continue
                flush = on & pending
                if flush.any():
                    m = torch.from_numpy(flush)
                    inv = np.linalg.inv(L[flush])
                    pm[m] = synth_ops.warp_rgba(pm[m], torch.from_numpy(inv), torch.zeros(int(flush.sum()), 2), True)
                    L[flush] = np.eye(2)
                    pending &= ~flush
                if t in COLOR_FLAGS:
                    m = torch.from_numpy(on)
                    flags = torch.full((int(on.sum()),), COLOR_FLAGS[t], dtype=torch.int64)
                    pm[m] = synth_ops.color(
                        pm[m],
                        torch.from_numpy(p["hue"][on]),
                        torch.from_numpy(p["brightness"][on]),
                        torch.from_numpy(p["contrast"][on]),
                        flags,
                        rec.posterize_bits,
                    )
                else:
                    pm = self._apply_local(t, pm, on, keys, p)
        if set(self.transforms) & set(GEOMETRIC):
            pm = self._place(pm, keys, p, L)
        return pm

    def _apply_local(
        self, t: str, pm: torch.Tensor, on: np.ndarray, keys: np.ndarray, p: dict[str, np.ndarray]
    ) -> torch.Tensor:
        """Apply the non-colour, non-geometric type ``t`` to the samples where ``on`` [B] is True."""
        if not on.any():
            return pm
        S, rec = self.size, self.recipe
        if t == "blur":
            taps = gaussian_taps(torch.from_numpy(p["blur_sigma"][on]), size=rec.blur_kernel).to(torch.float32)
            if on.all():
                return synth_ops.blur(pm, taps)
            m = torch.from_numpy(on)
            pm[m] = synth_ops.blur(pm[m], taps)
            return pm
        m = torch.from_numpy(on)
        if t == "sharpen":
            rgb, a = unpremultiply(pm[m])
            pm[m] = premultiply(ops2d.sharpen(rgb, rec.sharpen_factor), a)
        elif t == "pixelate":
            pm[m] = ops2d.pixelate(pm[m], rec.pixelate_ratio)
        elif t == "elastic":
            field = rng.uniform(keys[on], "elastic-field", 2 * S * S).reshape(-1, 2, S, S) * 2.0 - 1.0
            pm[m] = ops2d.elastic(
                pm[m], torch.from_numpy(field).to(torch.float32), rec.elastic_alpha, rec.elastic_sigma * S / 32.0
            )
        elif t == "erasing":
            side = max(1, int(round(rec.erase_side_32 * S / 32.0)))
            y0, y1, x0, x1 = alpha_box(pm[m])
            u = rng.uniform(keys[on], "erase-position", 2)
            cy = y0 + u[:, 0] * (y1 - y0)
            cx = x0 + u[:, 1] * (x1 - x0)
            top = np.clip(np.floor(cy - side / 2.0), 0, S - side).astype(np.int64)
            left = np.clip(np.floor(cx - side / 2.0), 0, S - side).astype(np.int64)
            pm[m] = ops2d.erase(pm[m], torch.from_numpy(top), torch.from_numpy(left), side)
            p["erase_y"][on] = (top + side / 2.0) / S
            p["erase_x"][on] = (left + side / 2.0) / S
        elif t == "noise":  # two-sided, clamped, alpha kept
            rgb, a = unpremultiply(pm[m])
            z = rng.normal(keys[on], "noise-pixels", 3 * S * S).reshape(-1, 3, S, S)
            rgb = (rgb + torch.from_numpy(z).to(torch.float32) * rec.noise_std).clamp_(0.0, 1.0)
            pm[m] = premultiply(rgb, a)
        else:
            raise AssertionError(f"not a local type: {t}")
        return pm

    def _place(self, pm: torch.Tensor, keys: np.ndarray, p: dict[str, np.ndarray], m: np.ndarray) -> torch.Tensor:
        """Warp ``pm`` by the linear map ``m`` [B, 2, 2] (normalised coordinates, about the canvas centre)
        and, with translate, place it (:func:`placement`); sets ``p['x']``, ``p['y']``."""
        offset = np.zeros((keys.shape[0], 2))
        if "translate" in self.transforms:
            X, Y = box_corners(alpha_box(pm), m, self.size)
            offset = placement(X, Y, rng.uniform(keys, "translate", 2))
        p["x"] = (offset[:, 0] + 1.0) / 2.0
        p["y"] = (offset[:, 1] + 1.0) / 2.0
        det = m[:, 0, 0] * m[:, 1, 1] - m[:, 0, 1] * m[:, 1, 0]
        inv = np.stack([np.stack([m[:, 1, 1], -m[:, 0, 1]], -1), np.stack([-m[:, 1, 0], m[:, 0, 0]], -1)], -2)
        return synth_ops.warp_rgba(pm, torch.from_numpy(inv / det[:, None, None]), torch.from_numpy(offset), True)

    def _order_indices(self, keys: np.ndarray) -> np.ndarray:
        """Order per sample, int64 [B, K]: row b lists indices into ``self.transforms`` in application order."""
        K = len(self.transforms)
        if isinstance(self.order, tuple):
            row = np.array([self.transforms.index(t) for t in self.order], dtype=np.int64)
            return np.broadcast_to(row, (keys.shape[0], K)).copy()
        return np.argsort(rng.uniform(keys, "order", K), axis=1, kind="stable").astype(np.int64)

    def orders(self, indices: Iterable[int]) -> list[tuple[str, ...]]:
        """The order in which each sample's transformation types are applied (one tuple of names per index).

        Without the canonical order the linear geometric types run at their position (consecutive ones fused
        into one warp) and translate places the finished object last whatever its position."""
        idx = as_indices(indices, self.n)
        if self.order == "canonical":
            return [tuple(t for t in CANONICAL_ORDER if t in self.transforms)] * idx.size
        perm = self._order_indices(rng.sample_keys(self.seed, self.split, idx))
        return [tuple(self.transforms[j] for j in row) for row in perm]

    # ------------------------------------------------------------------ identity and storage
    def config(self) -> dict[str, Any]:
        """Everything that determines the bytes of every sample (recorded in manifests)."""
        bg = (
            {"kind": RANDOM_BACKGROUNDS}
            if isinstance(self.backgrounds, str)
            else {"kind": "images", "n": int(self.backgrounds.shape[0]), "sha256": bank_checksum(self.backgrounds)}
        )
        return {
            "generator": "invfast.synthetic.Transforms2D",
            "format_version": GENERATOR_VERSION,
            "transforms": list(self.transforms),
            "size": self.size,
            "n": self.n,
            "seed": self.seed,
            "split": self.split,
            "objects": {
                "source": self.objects.source,
                "names": list(self.objects.names),
                "sha256": self.objects.checksum(),
            },
            "backgrounds": bg,
            "recipe": self.recipe.to_dict(),
            "params": list(PARAM_NAMES),
            # only when not the default, so canonical datasets keep the fingerprints they always had
            **(
                {"order": self.order if isinstance(self.order, str) else list(self.order)}
                if self.order != "canonical"
                else {}
            ),
        }

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.config(), sort_keys=True).encode()).hexdigest()

    def materialize(
        self,
        path: str | os.PathLike,
        *,
        batch_size: int = 2048,
        shard_size: int = 10_000,
        overwrite: bool = False,
        progress: bool = True,
    ) -> Path:
        """Write all samples to folder ``path`` (sharded .npy + manifest.json) and return it; a folder that holds
        this dataset already is verified and any damaged file regenerated exactly. Rules:
        :mod:`invfast.synthetic.writer`; :func:`invfast.synthetic.storage.materialize`."""
        from invfast.synthetic.storage import materialize

        return materialize(
            self,
            path,
            batch_size=batch_size,
            shard_size=shard_size,
            overwrite=overwrite,
            progress=progress,
        )

    def __repr__(self) -> str:
        return (
            f"Transforms2D(objects={self.num_classes}, transforms={list(self.transforms)}, size={self.size}, "
            f"n={self.n}, seed={self.seed}, split={self.split!r}"
            + (f", order={self.order!r})" if self.order != "canonical" else ")")
        )
