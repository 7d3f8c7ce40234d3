"""Transforms-2D (Speicher et al.): one prototype object per class, transformed and alpha-composited
onto a random background; every sample is a pure function of (seed, split, index)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from invfast.ops import synth as synth_ops
from invfast.ops.synth import COLOR_FLAGS, composite
from invfast.synthetic import ops2d, rng
from invfast.synthetic.banks import ObjectBank, bank_checksum, builtin_backgrounds, builtin_objects, load_backgrounds, load_objects
from invfast.synthetic.recipe import IDENTITY, PARAM_NAMES, Recipe, TRANSFORMATIONS, canonical, sample

FORMAT_VERSION = 1
DEFAULT_SIZES = {"train": 50_000, "val": 10_000, "test": 10_000}
RANDOM_BACKGROUNDS = "uniform-random"
_CHUNK_PER_THREAD = 256  # samples per thread rendered together: intermediates stay in cache

Batch = tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]


def _as_objects(objects: Any, n_classes: int | None) -> ObjectBank:
    if isinstance(objects, ObjectBank):
        bank = objects
    elif isinstance(objects, (int, np.integer)) and not isinstance(objects, bool):
        if objects < 1:
            raise ValueError(f"objects: need at least 1 object, got {objects}")
        bank = builtin_objects(max(61, int(objects))).subset(range(int(objects)))
    elif isinstance(objects, (str, os.PathLike)):
        bank = load_objects(objects)
    elif isinstance(objects, (list, tuple, range, np.ndarray, torch.Tensor)):
        idx = [int(i) for i in objects]
        if not idx:
            raise ValueError("objects: empty list of object indices")
        if len(set(idx)) != len(idx):
            raise ValueError("objects: object indices must be distinct (one class per object)")
        bank = builtin_objects(max(61, max(idx) + 1)).subset(idx)
    else:
        raise TypeError("objects must be an int (that many built-in objects), a list of built-in object "
                        "indices, an ObjectBank, or a folder path in the SI-score layout; "
                        f"got {type(objects).__name__}")
    if n_classes is not None:
        if n_classes < 1:
            raise ValueError(f"n_classes must be >= 1, got {n_classes}")
        if len(bank) < n_classes:
            raise ValueError(f"{n_classes} classes requested but the object bank holds only {len(bank)} objects "
                             "(one object per class); pass more objects or fewer classes")
        bank = bank.subset(range(n_classes))
    return bank


def _as_backgrounds(backgrounds: Any, size: int) -> torch.Tensor | str:
    if backgrounds is None:
        return builtin_backgrounds(867, size)
    if isinstance(backgrounds, str) and backgrounds == RANDOM_BACKGROUNDS:
        return RANDOM_BACKGROUNDS
    if isinstance(backgrounds, (str, os.PathLike)):
        return load_backgrounds(backgrounds, size=size)
    if isinstance(backgrounds, np.ndarray):
        backgrounds = torch.from_numpy(np.ascontiguousarray(backgrounds))
    if isinstance(backgrounds, torch.Tensor):
        t = backgrounds
        if t.dim() == 4 and t.shape[-1] == 3 and t.shape[1] != 3:
            t = t.permute(0, 3, 1, 2)
        if t.dim() != 4 or t.shape[1] != 3:
            raise ValueError(f"backgrounds must be [N, 3, H, W] or [N, H, W, 3], got {tuple(backgrounds.shape)}")
        if t.dtype != torch.uint8:
            if not t.is_floating_point():
                raise TypeError(f"backgrounds must be uint8 (0..255) or float (0..1), got {t.dtype}")
            t = (t.float().clamp(0, 1) * 255).round().to(torch.uint8)
        if t.shape[0] < 1:
            raise ValueError("backgrounds: need at least one background image")
        if tuple(t.shape[2:]) != (size, size):
            t = torch.nn.functional.interpolate(t.float(), size=(size, size), mode="bilinear",
                                                align_corners=False, antialias=True).round().clamp(0, 255).to(torch.uint8)
        return t.contiguous()
    raise TypeError(f"backgrounds must be None (built-in), {RANDOM_BACKGROUNDS!r}, a folder path or an image "
                    f"tensor/array, got {type(backgrounds).__name__}")


def _as_indices(indices: Any, n: int) -> np.ndarray:
    if isinstance(indices, torch.Tensor):
        indices = indices.cpu().numpy()
    if isinstance(indices, range):
        idx = np.arange(indices.start, indices.stop, indices.step, dtype=np.int64)
    else:
        idx = np.asarray(indices)
        if idx.dtype == bool or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx[(idx < 0) | (idx >= n)][0]
        raise IndexError(f"index {int(bad)} out of range for a dataset of {n} samples")
    return idx


class Transforms2D(torch.utils.data.Dataset):
    """A Transforms-2D dataset: random access by index, reproducible across batches and workers.

    Args:
        objects: int (the first that many built-in objects), list of built-in object indices,
            an :class:`ObjectBank`, or a folder in the SI-score layout. Object ``i`` is class ``i``.
        transforms: transformation types (names from ``TRANSFORMATIONS`` or 'rotate,hue,blur');
            all are applied to every sample, in a fixed order (see ``docs/synthetic.md``).
        size: image side in pixels.
        n: number of samples (default 50 000 / 10 000 / 10 000 for train / val / test).
        seed: dataset seed. ``split`` keys an independent stream, so splits never share samples.
        backgrounds: None (built-in), a folder, an image tensor/array, or 'uniform-random'
            (a fresh uniform-random background per sample).
        n_classes: use only the first ``n_classes`` objects (error if the bank has fewer).
        recipe: distribution constants (:class:`Recipe`, SPEC §2.3 by default).

    ``ds[idx]`` -> (image float32 [3, size, size] in [0, 1], label int, params dict[str, float]).
    Params are the latent factors (``PARAM_NAMES``): object centre ``x, y`` (fraction of the image
    side, 0 = left/top), ``angle`` (degrees, counter-clockwise), ``scale``, ``shear_x/y`` (degrees),
    ``hue`` (shift), ``brightness``/``contrast`` (factors), ``blur_sigma`` (px), 0/1 flags of the
    binary types, ``erase_x/y`` and the ``background`` index; identity values where not applied.
    """

    def __init__(self, objects: Any = 61, transforms: Any = (), size: int = 32, n: int | None = None,
                 seed: int = 0, split: str = "train", backgrounds: Any = None, n_classes: int | None = None,
                 recipe: Recipe | None = None):
        if not isinstance(size, (int, np.integer)) or size < 8:
            raise ValueError(f"size must be an int >= 8 pixels, got {size!r}")
        if not isinstance(split, str) or not split:
            raise ValueError(f"split must be a non-empty string, got {split!r}")
        if n is None:
            if split not in DEFAULT_SIZES:
                raise ValueError(f"n is required for split {split!r} (defaults exist for {sorted(DEFAULT_SIZES)})")
            n = DEFAULT_SIZES[split]
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self.transforms = canonical(transforms)
        self.size = int(size)
        self.n = int(n)
        self.seed = int(seed)
        self.split = split
        self.recipe = recipe or Recipe()
        self.objects = _as_objects(objects, n_classes)
        self.backgrounds = _as_backgrounds(backgrounds, self.size)
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
    def generate(self, indices: Iterable[int]) -> Batch:
        """Samples at ``indices``: (images uint8 [B, 3, size, size], labels int64 [B],
        params dict[str, float64 Tensor [B]]). Independent of batch composition and order."""
        idx = _as_indices(indices, self.n)
        keys = rng.sample_keys(self.seed, self.split, idx)
        chunk = _CHUNK_PER_THREAD * max(1, torch.get_num_threads())
        if idx.size <= chunk:
            return self._render(keys)
        # cache-sized chunks: samples are batch-independent, so chunking changes no byte
        S = self.size
        images = torch.empty(idx.size, 3, S, S, dtype=torch.uint8)
        labels = torch.empty(idx.size, dtype=torch.int64)
        params = {k: torch.empty(idx.size, dtype=torch.float64) for k in PARAM_NAMES}
        for c0 in range(0, idx.size, chunk):
            im, lab, par = self._render(keys[c0:c0 + chunk])
            images[c0:c0 + chunk] = im
            labels[c0:c0 + chunk] = lab
            for k in PARAM_NAMES:
                params[k][c0:c0 + chunk] = par[k]
        return images, labels, params

    def _render(self, keys: np.ndarray, labels: np.ndarray | None = None) -> Batch:
        B, S, rec, T = keys.shape[0], self.size, self.recipe, set(self.transforms)
        if labels is None:
            labels = rng.integers(keys, "object", self.num_classes)
        p = sample(keys, self.transforms, rec)
        pm = self._canvases.index_select(0, torch.from_numpy(labels))
        if B == 0:
            return (torch.zeros(0, 3, S, S, dtype=torch.uint8), torch.zeros(0, dtype=torch.int64),
                    {k: torch.zeros(0, dtype=torch.float64) for k in PARAM_NAMES})

        def mask(name: str) -> torch.Tensor:
            return torch.from_numpy(p[name] > 0.5)

        # 1. colour (straight colour, alpha kept), fused in one op; sharpen is a neighbourhood op
        colour = [t for t in COLOR_FLAGS if t in T]
        if colour:
            flags = np.zeros(B, np.int64)
            for t in colour:
                on = p[t] > 0.5 if t in ("grayscale", "posterize", "invert") else np.ones(B, bool)
                flags |= np.where(on, COLOR_FLAGS[t], 0)
            pm = synth_ops.color(pm, torch.from_numpy(p["hue"]), torch.from_numpy(p["brightness"]),
                                 torch.from_numpy(p["contrast"]), torch.from_numpy(flags), rec.posterize_bits)
        if "sharpen" in T:
            m = mask("sharpen")
            if bool(m.any()):
                rgb, a = ops2d.unpremultiply(pm[m])
                pm[m] = ops2d.premultiply(ops2d.sharpen(rgb, rec.sharpen_factor), a)
        # 2. corruptions in the object's frame
        if "blur" in T:
            pm = synth_ops.blur(pm, ops2d.gaussian_kernels(torch.from_numpy(p["blur_sigma"]), rec.blur_kernel))
        if "pixelate" in T:
            m = mask("pixelate")
            if bool(m.any()):
                pm[m] = ops2d.pixelate(pm[m], rec.pixelate_ratio)
        if "elastic" in T:
            m = mask("elastic")
            if bool(m.any()):
                km = keys[m.numpy()]
                field = rng.uniform(km, "elastic-field", 2 * S * S).reshape(-1, 2, S, S) * 2.0 - 1.0
                pm[m] = ops2d.elastic(pm[m], torch.from_numpy(field).to(torch.float32), rec.elastic_alpha,
                                      rec.elastic_sigma * S / 32.0)
        if "erasing" in T:
            m = mask("erasing")
            if bool(m.any()):
                mn = m.numpy()
                side = max(1, int(round(rec.erase_side_32 * S / 32.0)))
                y0, y1, x0, x1 = _alpha_box(pm[m])
                u = rng.uniform(keys[mn], "erase-position", 2)
                cy = y0 + u[:, 0] * (y1 - y0)
                cx = x0 + u[:, 1] * (x1 - x0)
                top = np.clip(np.floor(cy - side / 2.0), 0, S - side).astype(np.int64)
                left = np.clip(np.floor(cx - side / 2.0), 0, S - side).astype(np.int64)
                pm[m] = ops2d.erase(pm[m], torch.from_numpy(top), torch.from_numpy(left), side)
                p["erase_y"][mn] = (top + side / 2.0) / S
                p["erase_x"][mn] = (left + side / 2.0) / S
        # 3. geometry: one fused affine warp (flip, shear, scale, rotate, then translate)
        if T & {"translate", "rotate", "scale", "shear", "vflip", "hflip"}:
            pm = self._warp(pm, keys, p)
        # 4. noise on the placed object (two-sided, clamped, alpha kept)
        if "noise" in T:
            m = mask("noise")
            if bool(m.any()):
                rgb, a = ops2d.unpremultiply(pm[m])
                z = rng.normal(keys[m.numpy()], "noise-pixels", 3 * S * S).reshape(-1, 3, S, S)
                rgb = (rgb + torch.from_numpy(z).to(torch.float32) * rec.noise_std).clamp_(0.0, 1.0)
                pm[m] = ops2d.premultiply(rgb, a)
        # 5. composite
        if isinstance(self.backgrounds, str):
            px = rng.uniform(keys, "background-pixels", 3 * S * S)
            bgs = torch.from_numpy(np.minimum(np.floor(px * 256.0), 255).astype(np.uint8).reshape(B, 3, S, S))
            bg_idx = torch.arange(B)
            p["background"] = np.full(B, -1.0)
        else:
            bgi = rng.integers(keys, "background", self.backgrounds.shape[0])
            bgs, bg_idx = self.backgrounds, torch.from_numpy(bgi)
            p["background"] = bgi.astype(np.float64)
        images = composite(pm.contiguous(), bgs, bg_idx)
        params = {k: torch.from_numpy(np.ascontiguousarray(p[k], dtype=np.float64)) for k in PARAM_NAMES}
        return images, torch.from_numpy(labels.astype(np.int64)), params

    def _warp(self, pm: torch.Tensor, keys: np.ndarray, p: dict[str, np.ndarray]) -> torch.Tensor:
        S = self.size
        th = np.deg2rad(p["angle"])
        c, s = np.cos(th), np.sin(th)
        tx, ty = np.tan(np.deg2rad(p["shear_x"])), np.tan(np.deg2rad(p["shear_y"]))
        fx, fy = 1.0 - 2.0 * p["hflip"], 1.0 - 2.0 * p["vflip"]
        sc = p["scale"]
        # Sh = [[1, tx], [ty, 1 + tx ty]] (x-shear then y-shear, det 1); L = Sh @ diag(fx, fy) * sc
        l00, l01, l10, l11 = sc * fx, sc * tx * fy, sc * ty * fx, sc * (1.0 + tx * ty) * fy
        # M = R @ L with R = [[c, s], [-s, c]] (counter-clockwise as displayed)
        m00, m01 = c * l00 + s * l10, c * l01 + s * l11
        m10, m11 = -s * l00 + c * l10, -s * l01 + c * l11
        det = m00 * m11 - m01 * m10
        inv = np.stack([np.stack([m11, -m01], -1), np.stack([-m10, m00], -1)], -2) / det[:, None, None]
        offset = np.zeros((keys.shape[0], 2))
        if "translate" in self.transforms:
            y0, y1, x0, x1 = _alpha_box(pm)
            # box edges in normalised coordinates, widened by half a pixel for bilinear support
            ex0, ex1 = (x0 - 0.5) * 2.0 / S - 1.0, (x1 + 1.5) * 2.0 / S - 1.0
            ey0, ey1 = (y0 - 0.5) * 2.0 / S - 1.0, (y1 + 1.5) * 2.0 / S - 1.0
            cx = np.stack([ex0, ex1, ex0, ex1], 1)
            cy = np.stack([ey0, ey0, ey1, ey1], 1)
            X = m00[:, None] * cx + m01[:, None] * cy
            Y = m10[:, None] * cx + m11[:, None] * cy
            u = rng.uniform(keys, "translate", 2)
            lo_x, hi_x = -1.0 - X.min(1), 1.0 - X.max(1)
            lo_y, hi_y = -1.0 - Y.min(1), 1.0 - Y.max(1)
            offset[:, 0] = lo_x + u[:, 0] * (hi_x - lo_x)
            offset[:, 1] = lo_y + u[:, 1] * (hi_y - lo_y)
        p["x"] = (offset[:, 0] + 1.0) / 2.0
        p["y"] = (offset[:, 1] + 1.0) / 2.0
        return synth_ops.warp(pm, torch.from_numpy(inv), torch.from_numpy(offset), True)

    # ------------------------------------------------------------------ identity and storage
    def config(self) -> dict[str, Any]:
        """Everything that determines the bytes of every sample (recorded in manifests)."""
        bg = ({"kind": RANDOM_BACKGROUNDS} if isinstance(self.backgrounds, str) else
              {"kind": "images", "n": int(self.backgrounds.shape[0]), "sha256": bank_checksum(self.backgrounds)})
        return {
            "generator": "invfast.synthetic.Transforms2D", "format_version": FORMAT_VERSION,
            "transforms": list(self.transforms), "size": self.size, "n": self.n, "seed": self.seed,
            "split": self.split, "objects": {"source": self.objects.source, "names": list(self.objects.names),
                                             "sha256": self.objects.checksum()},
            "backgrounds": bg, "recipe": self.recipe.to_dict(), "params": list(PARAM_NAMES),
        }

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.config(), sort_keys=True).encode()).hexdigest()

    def materialize(self, path: str | os.PathLike, *, batch_size: int = 2048, shard_size: int = 10_000,
                    overwrite: bool = False, progress: bool = True) -> Path:
        """Write all samples to ``path`` (sharded .npy + manifest.json); see :func:`invfast.synthetic.storage.materialize`."""
        from invfast.synthetic.storage import materialize

        return materialize(self, path, batch_size=batch_size, shard_size=shard_size, overwrite=overwrite,
                           progress=progress)

    def __repr__(self) -> str:
        return (f"Transforms2D(objects={self.num_classes}, transforms={list(self.transforms)}, size={self.size}, "
                f"n={self.n}, seed={self.seed}, split={self.split!r})")


def _alpha_box(pm: torch.Tensor) -> tuple[np.ndarray, ...]:
    """Per-sample inclusive pixel box (y0, y1, x0, x1) of alpha > 0, float64 [B] each
    (the whole canvas for an empty alpha)."""
    S_h, S_w = pm.shape[-2:]
    a = pm[:, 3] > 0
    rows = a.any(dim=2).numpy()
    cols = a.any(dim=1).numpy()
    empty = ~rows.any(1)

    def first_last(m: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        first = np.argmax(m, axis=1).astype(np.float64)
        last = (n - 1 - np.argmax(m[:, ::-1], axis=1)).astype(np.float64)
        return np.where(empty, 0.0, first), np.where(empty, n - 1.0, last)

    y0, y1 = first_last(rows, S_h)
    x0, x1 = first_last(cols, S_w)
    return y0, y1, x0, x1
