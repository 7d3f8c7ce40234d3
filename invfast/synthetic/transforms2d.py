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
from invfast.synthetic.recipe import ALIASES, BINARY, GEOMETRIC, PARAM_NAMES, Recipe, canonical, sample

# generator version in every config/fingerprint: 2 = centre kept inside the image for boxes longer than
# the image (those draws changed), so a dataset materialised by version 1 is not taken for the same one
FORMAT_VERSION = 2
DEFAULT_SIZES = {"train": 50_000, "val": 10_000, "test": 10_000}
RANDOM_BACKGROUNDS = "uniform-random"
#: the split names with a default size; ``invfast.synthetic.check_split`` accepts only these
SPLITS: tuple[str, ...] = tuple(DEFAULT_SIZES)
#: per-sample orders of the transformation types (see ``Transforms2D``)
ORDERS: tuple[str, ...] = ("canonical", "random")
#: geometric types that are linear maps about the object's centre (translate is the placement)
LINEAR_GEOMETRIC: tuple[str, ...] = ("rotate", "scale", "shear", "vflip", "hflip")
#: the order of application with ``order='canonical'`` (colour types fused in one pass; the geometric
#: types fused in one warp that also places the object; noise on the placed object)
CANONICAL_ORDER: tuple[str, ...] = ("hue", "brightness", "contrast", "grayscale", "posterize", "invert", "sharpen",
                                    "blur", "pixelate", "elastic", "erasing", "hflip", "vflip", "shear", "scale",
                                    "rotate", "translate", "noise")
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

    def __init__(self, objects: Any = 61, transforms: Any = (), size: int = 32, n: int | None = None,
                 seed: int = 0, split: str = "train", backgrounds: Any = None, n_classes: int | None = None,
                 recipe: Recipe | None = None, order: str = "canonical"):
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
        self.order = _as_order(order, self.transforms)
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
        B, S, rec = keys.shape[0], self.size, self.recipe
        if labels is None:
            labels = rng.integers(keys, "object", self.num_classes)
        p = sample(keys, self.transforms, rec)
        pm = self._canvases.index_select(0, torch.from_numpy(labels))
        if B == 0:
            return (torch.zeros(0, 3, S, S, dtype=torch.uint8), torch.zeros(0, dtype=torch.int64),
                    {k: torch.zeros(0, dtype=torch.float64) for k in PARAM_NAMES})
        if self.order != "canonical":
            pm = self._transform_in_order(pm, keys, p)
        else:
            pm = self._transform_canonical(pm, keys, p)
        # composite
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
            pm = synth_ops.color(pm, torch.from_numpy(p["hue"]), torch.from_numpy(p["brightness"]),
                                 torch.from_numpy(p["contrast"]), torch.from_numpy(flags), rec.posterize_bits)
        for t in ("sharpen", "blur", "pixelate", "elastic", "erasing"):
            if t in T:
                pm = self._apply_local(t, pm, np.ones(B, bool) if t == "blur" else p[t] > 0.5, keys, p)
        if T & set(GEOMETRIC):
            pm = self._place(pm, keys, p, _canonical_linear(p))
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
                    L[sel] = np.einsum("bij,bjk->bik", _type_matrix(t, p, sel), L[sel])
                    pending |= sel
                    continue
                on = sel & (p[t] > 0.5) if t in BINARY else sel
                if not on.any():
                    continue
                flush = on & pending
                if flush.any():
                    m = torch.from_numpy(flush)
                    inv = np.linalg.inv(L[flush])
                    pm[m] = synth_ops.warp(pm[m], torch.from_numpy(inv), torch.zeros(int(flush.sum()), 2), True)
                    L[flush] = np.eye(2)
                    pending &= ~flush
                if t in COLOR_FLAGS:
                    m = torch.from_numpy(on)
                    flags = torch.full((int(on.sum()),), COLOR_FLAGS[t], dtype=torch.int64)
                    pm[m] = synth_ops.color(pm[m], torch.from_numpy(p["hue"][on]),
                                            torch.from_numpy(p["brightness"][on]),
                                            torch.from_numpy(p["contrast"][on]), flags, rec.posterize_bits)
                else:
                    pm = self._apply_local(t, pm, on, keys, p)
        if set(self.transforms) & set(GEOMETRIC):
            pm = self._place(pm, keys, p, L)
        return pm

    def _apply_local(self, t: str, pm: torch.Tensor, on: np.ndarray, keys: np.ndarray,
                     p: dict[str, np.ndarray]) -> torch.Tensor:
        """Apply the non-colour, non-geometric type ``t`` to the samples where ``on`` [B] is True."""
        if not on.any():
            return pm
        S, rec = self.size, self.recipe
        if t == "blur":
            taps = ops2d.gaussian_kernels(torch.from_numpy(p["blur_sigma"][on]), rec.blur_kernel)
            if on.all():
                return synth_ops.blur(pm, taps)
            m = torch.from_numpy(on)
            pm[m] = synth_ops.blur(pm[m], taps)
            return pm
        m = torch.from_numpy(on)
        if t == "sharpen":
            rgb, a = ops2d.unpremultiply(pm[m])
            pm[m] = ops2d.premultiply(ops2d.sharpen(rgb, rec.sharpen_factor), a)
        elif t == "pixelate":
            pm[m] = ops2d.pixelate(pm[m], rec.pixelate_ratio)
        elif t == "elastic":
            field = rng.uniform(keys[on], "elastic-field", 2 * S * S).reshape(-1, 2, S, S) * 2.0 - 1.0
            pm[m] = ops2d.elastic(pm[m], torch.from_numpy(field).to(torch.float32), rec.elastic_alpha,
                                  rec.elastic_sigma * S / 32.0)
        elif t == "erasing":
            side = max(1, int(round(rec.erase_side_32 * S / 32.0)))
            y0, y1, x0, x1 = _alpha_box(pm[m])
            u = rng.uniform(keys[on], "erase-position", 2)
            cy = y0 + u[:, 0] * (y1 - y0)
            cx = x0 + u[:, 1] * (x1 - x0)
            top = np.clip(np.floor(cy - side / 2.0), 0, S - side).astype(np.int64)
            left = np.clip(np.floor(cx - side / 2.0), 0, S - side).astype(np.int64)
            pm[m] = ops2d.erase(pm[m], torch.from_numpy(top), torch.from_numpy(left), side)
            p["erase_y"][on] = (top + side / 2.0) / S
            p["erase_x"][on] = (left + side / 2.0) / S
        elif t == "noise":  # two-sided, clamped, alpha kept
            rgb, a = ops2d.unpremultiply(pm[m])
            z = rng.normal(keys[on], "noise-pixels", 3 * S * S).reshape(-1, 3, S, S)
            rgb = (rgb + torch.from_numpy(z).to(torch.float32) * rec.noise_std).clamp_(0.0, 1.0)
            pm[m] = ops2d.premultiply(rgb, a)
        else:
            raise AssertionError(f"not a local type: {t}")
        return pm

    def _place(self, pm: torch.Tensor, keys: np.ndarray, p: dict[str, np.ndarray], m: np.ndarray) -> torch.Tensor:
        """Warp ``pm`` by the linear map ``m`` [B, 2, 2] (normalised coordinates, about the canvas centre)
        and, with translate, place it (:func:`placement`); sets ``p['x']``, ``p['y']``."""
        offset = np.zeros((keys.shape[0], 2))
        if "translate" in self.transforms:
            X, Y = _box_corners(_alpha_box(pm), m, self.size)
            offset = placement(X, Y, rng.uniform(keys, "translate", 2))
        p["x"] = (offset[:, 0] + 1.0) / 2.0
        p["y"] = (offset[:, 1] + 1.0) / 2.0
        det = m[:, 0, 0] * m[:, 1, 1] - m[:, 0, 1] * m[:, 1, 0]
        inv = np.stack([np.stack([m[:, 1, 1], -m[:, 0, 1]], -1), np.stack([-m[:, 1, 0], m[:, 0, 0]], -1)], -2)
        return synth_ops.warp(pm, torch.from_numpy(inv / det[:, None, None]), torch.from_numpy(offset), True)

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
        idx = _as_indices(indices, self.n)
        if self.order == "canonical":
            return [tuple(t for t in CANONICAL_ORDER if t in self.transforms)] * idx.size
        perm = self._order_indices(rng.sample_keys(self.seed, self.split, idx))
        return [tuple(self.transforms[j] for j in row) for row in perm]

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
            # only when not the default, so canonical datasets keep the fingerprints they always had
            **({"order": self.order if isinstance(self.order, str) else list(self.order)}
               if self.order != "canonical" else {}),
        }

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.config(), sort_keys=True).encode()).hexdigest()

    def materialize(self, path: str | os.PathLike, *, batch_size: int = 2048, shard_size: int = 10_000,
                    overwrite: bool = False, progress: bool = True, own_files: Iterable[str] = ()) -> Path:
        """Write all samples to ``path`` (sharded .npy + manifest.json); see :func:`invfast.synthetic.storage.materialize`."""
        from invfast.synthetic.storage import materialize

        return materialize(self, path, batch_size=batch_size, shard_size=shard_size, overwrite=overwrite,
                           progress=progress, own_files=own_files)

    def __repr__(self) -> str:
        return (f"Transforms2D(objects={self.num_classes}, transforms={list(self.transforms)}, size={self.size}, "
                f"n={self.n}, seed={self.seed}, split={self.split!r}"
                + (f", order={self.order!r})" if self.order != "canonical" else ")"))


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


def check_split(split: str) -> str:
    """``split`` if it is one of :data:`SPLITS` (``train``, ``val``, ``test``), else ValueError naming them.

    For spec parsers (``synthetic:...,split=NAME``); :class:`Transforms2D` itself also takes other names
    with an explicit ``n`` (each name keys an independent stream)."""
    if not isinstance(split, str) or split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return split


def _box_corners(box: tuple[np.ndarray, ...], m: np.ndarray, S: int) -> tuple[np.ndarray, np.ndarray]:
    """Corners (X, Y) [B, 4] of the pixel ``box`` (y0, y1, x0, x1 of :func:`_alpha_box`) mapped by ``m``
    [B, 2, 2], normalised coordinates relative to the canvas centre."""
    y0, y1, x0, x1 = box
    # box edges in normalised coordinates, widened by half a pixel for bilinear support
    ex0, ex1 = (x0 - 0.5) * 2.0 / S - 1.0, (x1 + 1.5) * 2.0 / S - 1.0
    ey0, ey1 = (y0 - 0.5) * 2.0 / S - 1.0, (y1 + 1.5) * 2.0 / S - 1.0
    cx = np.stack([ex0, ex1, ex0, ex1], 1)
    cy = np.stack([ey0, ey0, ey1, ey1], 1)
    return m[:, 0, 0, None] * cx + m[:, 0, 1, None] * cy, m[:, 1, 0, None] * cx + m[:, 1, 1, None] * cy


def placement(X: np.ndarray, Y: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Where the object goes: offsets float64 [B, 2] (x, y) of its centre, normalised (−1, 1 = image edges).

    ``X``, ``Y`` [B, 4]: corners of the object's (transformed) bounding box relative to its centre, in the
    same units; ``u`` [B, 2]: uniforms in [0, 1). Per axis, a box that fits is placed uniformly inside the
    image. A box longer than the image (a sheared/scaled object) is placed uniformly among the positions
    where it covers the image *and* its centre lies inside the image, so the centre never leaves the
    image (the original pastes into an image-sized canvas, which clips the object the same way).
    """
    out = np.empty((X.shape[0], 2))
    for j, C in enumerate((X, Y)):
        lo, hi = -1.0 - C.min(1), 1.0 - C.max(1)  # fits: lo <= hi; covers the image: hi <= offset <= lo
        # offset = a + u (b - a) with a = lo, b = hi when it fits; when it does not, [b, a] = [hi, lo]
        # (the covering positions) cut to the image [-1, 1]
        big = lo > hi
        a = np.where(big, np.minimum(lo, 1.0), lo)
        b = np.where(big, np.maximum(hi, -1.0), hi)
        # a centre outside its own box (never for the centred base layout): the nearest point inside
        bad = big & (b > a)
        mid = np.clip(0.5 * (lo + hi), -1.0, 1.0)
        a, b = np.where(bad, mid, a), np.where(bad, mid, b)
        out[:, j] = np.clip(a + u[:, j] * (b - a), -1.0, 1.0)
    return out


def _canonical_linear(p: dict[str, np.ndarray]) -> np.ndarray:
    """The canonical order's linear map [B, 2, 2]: flip, then shear, scale, rotate (normalised coordinates)."""
    th = np.deg2rad(p["angle"])
    c, s = np.cos(th), np.sin(th)
    tx, ty = np.tan(np.deg2rad(p["shear_x"])), np.tan(np.deg2rad(p["shear_y"]))
    fx, fy = 1.0 - 2.0 * p["hflip"], 1.0 - 2.0 * p["vflip"]
    sc = p["scale"]
    # Sh = [[1, tx], [ty, 1 + tx ty]] (x-shear then y-shear, det 1); L = Sh @ diag(fx, fy) * sc
    l00, l01, l10, l11 = sc * fx, sc * tx * fy, sc * ty * fx, sc * (1.0 + tx * ty) * fy
    # M = R @ L with R = [[c, s], [-s, c]] (counter-clockwise as displayed)
    return np.stack([np.stack([c * l00 + s * l10, c * l01 + s * l11], -1),
                     np.stack([-s * l00 + c * l10, -s * l01 + c * l11], -1)], -2)


def _type_matrix(t: str, p: dict[str, np.ndarray], sel: np.ndarray) -> np.ndarray:
    """The linear map [n, 2, 2] of one geometric type for the samples ``sel`` (same conventions as
    :func:`_canonical_linear`)."""
    n = int(sel.sum())
    one, zero = np.ones(n), np.zeros(n)
    if t == "rotate":
        th = np.deg2rad(p["angle"][sel])
        c, s = np.cos(th), np.sin(th)
        rows = ((c, s), (-s, c))
    elif t == "scale":
        sc = p["scale"][sel]
        rows = ((sc, zero), (zero, sc))
    elif t == "shear":
        tx, ty = np.tan(np.deg2rad(p["shear_x"][sel])), np.tan(np.deg2rad(p["shear_y"][sel]))
        rows = ((one, tx), (ty, 1.0 + tx * ty))
    elif t == "hflip":
        rows = ((1.0 - 2.0 * p["hflip"][sel], zero), (zero, one))
    elif t == "vflip":
        rows = ((one, zero), (zero, 1.0 - 2.0 * p["vflip"][sel]))
    else:
        raise ValueError(f"{t!r} is not a linear geometric type")
    return np.stack([np.stack(r, -1) for r in rows], -2)


def _as_order(order: Any, transforms: tuple[str, ...]) -> str | tuple[str, ...]:
    """``'canonical'``, ``'random'``, or a validated tuple naming every type of ``transforms`` once."""
    if isinstance(order, str) and order in ORDERS:
        return order
    if isinstance(order, str):
        order = [t.strip() for t in order.split(",") if t.strip()]
    if isinstance(order, (list, tuple)) and all(isinstance(t, str) for t in order):
        names = tuple(ALIASES.get(t.lower(), t.lower()) for t in order)
        if sorted(names) == sorted(transforms) and len(set(names)) == len(names):
            return names
    raise ValueError(f"order must be one of {', '.join(ORDERS)}, or name each of the dataset's types once "
                     f"({', '.join(transforms) or 'none'}), got {order!r}")
