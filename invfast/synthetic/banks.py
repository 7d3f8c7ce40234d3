"""Object and background banks for Transforms-2D.

* :func:`builtin_objects` draws procedural RGBA objects (shape x texture x colour, anti-aliased
  alpha masks), deterministic and offline.
* :func:`builtin_backgrounds` cuts square crops from the photographs shipped with scikit-image and
  scikit-learn and adds procedural textures.
* :func:`load_objects` / :func:`load_backgrounds` read user folders in the SI-score layout
  (``objects/<category>/*.png`` with alpha; ``backgrounds/*.jpg|png``).
"""

from __future__ import annotations

import colorsys
import functools
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from invfast.synthetic import rng

_IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


@dataclass
class ObjectBank:
    """Foreground objects, one per class: ``images[i]`` is uint8 RGBA [H_i, W_i, 4] (straight alpha)."""

    images: list[np.ndarray]
    names: list[str]
    source: str = "builtin"
    _checksum: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if len(self.images) != len(self.names):
            raise ValueError(f"ObjectBank: {len(self.images)} images but {len(self.names)} names")
        for img, name in zip(self.images, self.names):
            if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 4:
                raise ValueError(
                    f"ObjectBank: object {name!r} must be uint8 [H, W, 4] (RGBA), got {img.dtype} {img.shape}"
                )

    def __len__(self) -> int:
        return len(self.images)

    def subset(self, indices: Sequence[int]) -> ObjectBank:
        """The objects at ``indices`` (in that order) as a new bank."""
        idx = [int(i) for i in indices]
        bad = [i for i in idx if not 0 <= i < len(self)]
        if bad:
            raise ValueError(f"ObjectBank.subset: indices {bad[:5]} out of range for {len(self)} objects")
        return ObjectBank([self.images[i] for i in idx], [self.names[i] for i in idx], self.source)

    def checksum(self) -> str:
        """sha256 over names and pixels: identifies the bank in dataset manifests."""
        if self._checksum is None:
            h = hashlib.sha256()
            for img, name in zip(self.images, self.names):
                h.update(name.encode())
                h.update(np.asarray(img.shape, np.int64).tobytes())
                h.update(np.ascontiguousarray(img).tobytes())
            self._checksum = h.hexdigest()
        return self._checksum

    def canvases(self, size: int, fill: float = 0.7) -> torch.Tensor:
        """Base layout: each object cropped to its alpha box, resized (aspect kept) so its longer side
        is ``fill * size`` and centred on a transparent ``size x size`` canvas.

        Returns float32 [N, 4, size, size], premultiplied RGBA in [0, 1].
        """
        out = torch.zeros(len(self), 4, size, size)
        target = max(1, int(round(fill * size)))
        for i, img in enumerate(self.images):
            a = img[..., 3]
            ys, xs = np.nonzero(a)
            if ys.size == 0:
                raise ValueError(f"object {self.names[i]!r} is fully transparent")
            crop = img[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1].astype(np.float32) / 255.0
            crop[..., :3] *= crop[..., 3:4]
            h, w = crop.shape[:2]
            s = target / max(h, w)
            nh, nw = max(1, int(round(h * s))), max(1, int(round(w * s)))
            t = torch.from_numpy(crop).permute(2, 0, 1)[None]
            t = F.interpolate(t, size=(nh, nw), mode="bilinear", align_corners=False, antialias=True).clamp_(0, 1)[0]
            t[:3] = torch.minimum(t[:3], t[3:4])
            y0, x0 = (size - nh) // 2, (size - nw) // 2
            out[i, :, y0 : y0 + nh, x0 : x0 + nw] = t
        return out


# ----------------------------------------------------------------------------- procedural objects


def _polar(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.hypot(u, v), np.arctan2(v, u)


def _regular_polygon(u, v, k, rot=0.0, r=0.9):
    rad, th = _polar(u, v)
    sector = 2 * np.pi / k
    a = np.mod(th - rot, sector) - sector / 2
    return rad * np.cos(a) <= r * np.cos(np.pi / k)


def _star(u, v, k, inner=0.45, r=0.95):
    rad, th = _polar(u, v)
    sector = 2 * np.pi / k
    a = np.abs(np.mod(th + np.pi / 2, sector) - sector / 2) / (sector / 2)
    return rad <= inner * r + (1 - inner) * r * (1 - a) ** 1.5


_SHAPES = {
    "disc": lambda u, v: u * u + v * v <= 0.9**2,
    "ellipse": lambda u, v: (u / 0.95) ** 2 + (v / 0.55) ** 2 <= 1,
    "square": lambda u, v: (np.abs(u) <= 0.8) & (np.abs(v) <= 0.8),
    "triangle": lambda u, v: _regular_polygon(u, v, 3, rot=np.pi / 2, r=0.95),
    "diamond": lambda u, v: np.abs(u) / 0.6 + np.abs(v) / 0.95 <= 1,
    "pentagon": lambda u, v: _regular_polygon(u, v, 5, rot=np.pi / 2),
    "hexagon": lambda u, v: _regular_polygon(u, v, 6),
    "star": lambda u, v: _star(u, v, 5),
    "sun": lambda u, v: _star(u, v, 9, inner=0.65),
    "cross": lambda u, v: ((np.abs(u) <= 0.3) & (np.abs(v) <= 0.9)) | ((np.abs(v) <= 0.3) & (np.abs(u) <= 0.9)),
    "ring": lambda u, v: (u * u + v * v <= 0.9**2) & (u * u + v * v >= 0.5**2),
    "heart": lambda u, v: (1.2 * u) ** 2 + (-1.2 * v + 0.2 - np.sqrt(np.abs(1.2 * u))) ** 2 <= 1.0,
    "crescent": lambda u, v: (u * u + v * v <= 0.9**2) & ((u - 0.4) ** 2 + (v + 0.15) ** 2 >= 0.7**2),
    "arrow": lambda u, v: (
        ((np.abs(v) <= 0.22) & (u >= -0.9) & (u <= 0.2))
        | ((u >= 0.2) & (u <= 0.9) & (np.abs(v) <= 0.8 * (0.9 - u) / 0.7))
    ),
    "ell": lambda u, v: (
        ((u >= -0.8) & (u <= -0.3) & (np.abs(v) <= 0.9)) | ((v >= 0.4) & (v <= 0.9) & (np.abs(u) <= 0.8))
    ),
    "flower": lambda u, v: _polar(u, v)[0] <= 0.55 + 0.35 * np.cos(6 * _polar(u, v)[1]),
    "blob": lambda u, v: (
        _polar(u, v)[0] <= 0.7 + 0.15 * np.sin(3 * _polar(u, v)[1] + 1) + 0.1 * np.cos(5 * _polar(u, v)[1])
    ),
    "tee": lambda u, v: (
        ((v >= -0.9) & (v <= -0.45) & (np.abs(u) <= 0.9)) | ((np.abs(u) <= 0.25) & (v <= 0.9) & (v >= -0.9))
    ),
}

_TEXTURES = ("solid", "stripes", "checker", "dots", "radial", "gradient", "rings", "noise")


def _texture(name: str, u: np.ndarray, v: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Blend weight in [0, 1] between the object's two colours."""
    if name == "solid":
        return np.zeros_like(u)
    if name == "stripes":
        ang = rng.uniform(key, "stripe-angle")[0] * np.pi
        return (np.sin((u * np.cos(ang) + v * np.sin(ang)) * 4 * np.pi) > 0).astype(np.float64)
    if name == "checker":
        return ((np.floor((u + 1) * 3) + np.floor((v + 1) * 3)) % 2).astype(np.float64)
    if name == "dots":
        return ((np.mod(u * 3.5, 1) - 0.5) ** 2 + (np.mod(v * 3.5, 1) - 0.5) ** 2 < 0.09).astype(np.float64)
    if name == "radial":
        return np.clip(np.hypot(u, v), 0, 1)
    if name == "gradient":
        return np.clip((u + v + 2) / 4, 0, 1)
    if name == "rings":
        return (np.sin(np.hypot(u, v) * 5 * np.pi) > 0).astype(np.float64)
    if name == "noise":
        g = rng.uniform(key, "noise-texture", 64).reshape(8, 8)
        iy = np.clip(((v + 1) / 2 * 8).astype(int), 0, 7)
        ix = np.clip(((u + 1) / 2 * 8).astype(int), 0, 7)
        return g[iy, ix]
    raise KeyError(name)


def _render_object(i: int, res: int, supersample: int = 4) -> tuple[np.ndarray, str]:
    shapes = list(_SHAPES)
    ns, nt = len(shapes), len(_TEXTURES)
    shape = shapes[i % ns]
    texture = _TEXTURES[(i // ns + i) % nt]
    key = rng.sample_keys(i, "builtin-object", np.array([0]))
    hue = (0.13 + i * 0.6180339887) % 1.0
    sat = 0.55 + 0.45 * ((i * 0.3819660113) % 1.0)
    val = 0.6 + 0.4 * ((i * 0.7548776662) % 1.0)
    c1 = np.array(colorsys.hsv_to_rgb(hue, sat, val))
    c2 = np.array(
        colorsys.hsv_to_rgb(
            (hue + 0.35 + 0.3 * ((i // ns) % 2)) % 1.0,
            0.3 + 0.7 * ((i * 0.45) % 1.0),
            0.25 + 0.75 * (((i + 3) * 0.37) % 1.0),
        )
    )
    n = res * supersample
    c = (np.arange(n) + 0.5) / n * 2 - 1
    v, u = np.meshgrid(c, c, indexing="ij")
    mask = _SHAPES[shape](u, v).astype(np.float64)
    w = _texture(texture, u, v, key)[..., None]
    rgb = c1 * (1 - w) + c2 * w
    # area-average the premultiplied colour and alpha (anti-aliasing), then un-premultiply
    pm = np.concatenate([rgb * mask[..., None], mask[..., None]], axis=2)
    pm = pm.reshape(res, supersample, res, supersample, 4).mean(axis=(1, 3))
    a = pm[..., 3:4]
    rgb_s = np.where(a > 0, pm[..., :3] / np.maximum(a, 1e-12), 0.0)
    img = np.concatenate([rgb_s, a], axis=2)
    return np.clip(np.round(img * 255), 0, 255).astype(np.uint8), f"{i:03d}-{shape}-{texture}"


@functools.lru_cache(maxsize=8)
def _builtin_objects_cached(n: int, res: int) -> ObjectBank:
    imgs, names = zip(*(_render_object(i, res) for i in range(n)))
    return ObjectBank(list(imgs), list(names), source=f"builtin:{n}:{res}")


def builtin_objects(n: int = 61, resolution: int = 64) -> ObjectBank:
    """``n`` procedural objects (deterministic, offline), RGBA with anti-aliased alpha masks.

    Object ``i`` combines one of 18 shapes, one of 8 textures and a colour pair from a golden-ratio
    hue sequence; the (shape, texture) pair is unique for ``n <= 144`` and the colours differ for all.
    ``resolution`` is the side of the stored RGBA images in pixels.
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"builtin_objects: n must be a positive int, got {n!r}")
    if resolution < 8:
        raise ValueError(f"builtin_objects: resolution must be >= 8 px, got {resolution}")
    return _builtin_objects_cached(int(n), int(resolution))


def random_pattern_objects(n: int, size: int = 32, seed: int = 0) -> ObjectBank:
    """Strong-OOD objects (Speicher App. D.1): one fixed uniform-random RGB square pattern per class,
    fully opaque, ``size`` px (placed at 70% of the image side by the base layout)."""
    if n < 1:
        raise ValueError(f"random_pattern_objects: n must be positive, got {n}")
    keys = rng.sample_keys(seed, "random-pattern", np.arange(n))
    px = rng.uniform(keys, "pixels", size * size * 3).reshape(n, size, size, 3)
    rgb = np.floor(px * 256).clip(0, 255).astype(np.uint8)
    alpha = np.full((n, size, size, 1), 255, np.uint8)
    imgs = np.concatenate([rgb, alpha], axis=3)
    return ObjectBank(list(imgs), [f"pattern-{i:03d}" for i in range(n)], source=f"random-pattern:{seed}:{size}")


# ----------------------------------------------------------------------------- backgrounds


#: scikit-image's colour photographs, in the order the photo bank lists them
SKIMAGE_COLOUR_PHOTOS: tuple[str, ...] = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "hubble_deep_field",
    "retina",
    "immunohistochemistry",
    "colorwheel",
)


def _photo_sources() -> list[tuple[str, np.ndarray]]:
    """The colour photographs shipped offline with scikit-image and scikit-learn (RGB uint8)."""
    import skimage.data as skd

    out = []
    for name in SKIMAGE_COLOUR_PHOTOS:
        try:
            img = getattr(skd, name)()
        except Exception:  # an image missing from this scikit-image build is skipped
            continue
        out.append((name, np.ascontiguousarray(img[..., :3])))
    for name in ("brick", "grass", "gravel", "coins", "camera", "clock"):
        try:
            g = getattr(skd, name)()
        except Exception:
            continue
        out.append((name, np.repeat(g[..., None], 3, axis=2)))
    try:
        from sklearn.datasets import load_sample_images
    except ImportError:  # scikit-learn is optional
        load_sample_images = None
    if load_sample_images is not None:
        sample = load_sample_images()
        for fname, img in zip(sample.filenames, sample.images):
            out.append((os.path.basename(fname), np.ascontiguousarray(img)))
    if not out:
        raise RuntimeError(
            "builtin_backgrounds: no photographs found in scikit-image / scikit-learn; "
            "install scikit-image, or pass backgrounds=load_backgrounds(folder)"
        )
    return out


def _procedural_texture(j: int, size: int) -> np.ndarray:
    """Smooth multi-octave value noise in two random colours, or stripes/gradients (uint8 [size, size, 3])."""
    key = rng.sample_keys(j, "procedural-background", np.array([0]))
    kind = j % 3
    c = (np.arange(size) + 0.5) / size
    yy, xx = np.meshgrid(c, c, indexing="ij")
    if kind == 0:
        field_ = np.zeros((size, size))
        for o, cells in enumerate((4, 8, 16)):
            g = rng.uniform(key, f"octave{o}", (cells + 1) ** 2).reshape(cells + 1, cells + 1)
            t = torch.from_numpy(g)[None, None]
            up = F.interpolate(t, size=(size, size), mode="bicubic", align_corners=True)[0, 0].numpy()
            field_ += up / (2**o)
        w = (field_ - field_.min()) / max(np.ptp(field_), 1e-9)
    elif kind == 1:
        ang = rng.uniform(key, "angle")[0] * np.pi
        freq = 2 + 6 * rng.uniform(key, "freq")[0]
        w = 0.5 + 0.5 * np.sin((xx * np.cos(ang) + yy * np.sin(ang)) * freq * 2 * np.pi)
    else:
        cx, cy = rng.uniform(key, "centre", 2)[0]
        w = np.clip(np.hypot(xx - cx, yy - cy) * 1.4, 0, 1)
    cols = rng.uniform(key, "colours", 6).reshape(2, 3)
    rgb = cols[0] * (1 - w[..., None]) + cols[1] * w[..., None]
    return np.clip(np.round(rgb * 255), 0, 255).astype(np.uint8)


@functools.lru_cache(maxsize=1)
def _photo_sources_cached() -> tuple:
    return tuple(_photo_sources())


@functools.lru_cache(maxsize=8)
def _builtin_backgrounds_cached(n: int, size: int, procedural_fraction: float) -> torch.Tensor:
    from PIL import Image

    sources = _photo_sources_cached()
    # shrink each photograph once so that the smallest crop still has >= 1.5x the output resolution
    short = max(64, int(np.ceil(1.5 * size / 0.15)))
    shrunk = []
    for _, img in sources:
        h, w = img.shape[:2]
        s = min(1.0, short / min(h, w))
        pil = Image.fromarray(img)
        if s < 1.0:
            pil = pil.resize((max(1, round(w * s)), max(1, round(h * s))), Image.Resampling.BOX)
        shrunk.append(pil)
    n_proc = int(round(n * procedural_fraction))
    out = np.empty((n, size, size, 3), np.uint8)
    keys = rng.sample_keys(0, "builtin-background", np.arange(n))
    side_u = rng.uniform(keys, "side")
    pos_u = rng.uniform(keys, "pos", 2)
    src_idx = rng.integers(keys, "source", len(sources))
    for j in range(n):
        if j < n_proc:
            out[j] = _procedural_texture(j, size)
            continue
        pil = shrunk[src_idx[j]]
        w, h = pil.size
        side = min(max(size, int(min(h, w) * (0.15 + 0.45 * side_u[j]))), h, w)
        y0 = int(pos_u[j, 0] * (h - side + 1))
        x0 = int(pos_u[j, 1] * (w - side + 1))
        out[j] = np.asarray(pil.resize((size, size), Image.Resampling.BOX, box=(x0, y0, x0 + side, y0 + side)))
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


def builtin_backgrounds(n: int = 867, size: int = 32, procedural_fraction: float = 0.25) -> torch.Tensor:
    """``n`` backgrounds, uint8 [n, 3, size, size]: square crops (random side 15-60% of the shorter
    side, random position) of the photographs shipped with scikit-image / scikit-learn, resized with
    antialiasing, plus ``procedural_fraction`` of procedural textures. Deterministic."""
    if n < 1 or size < 4:
        raise ValueError(f"builtin_backgrounds: need n >= 1 and size >= 4, got n={n}, size={size}")
    if not 0.0 <= procedural_fraction <= 1.0:
        raise ValueError(f"builtin_backgrounds: procedural_fraction must be in [0, 1], got {procedural_fraction}")
    return _builtin_backgrounds_cached(int(n), int(size), float(procedural_fraction))


# ----------------------------------------------------------------------------- user folders


def _open_image(path: Path):
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(path)
        img.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ValueError(f"cannot read image {str(path)!r}: {exc} (corrupt or not an image file)") from exc
    return img


def _has_alpha(img) -> bool:
    return img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (img.mode == "P" and "transparency" in img.info)


def load_objects(path: str | os.PathLike, per_category: str = "first") -> ObjectBank:
    """Objects from a folder in the SI-score layout: ``path/<category>/<image>.png`` (RGBA).

    One object per category: the file with the lowest lexicographic name (as Speicher et al.).
    A flat folder of RGBA PNGs (one class per file) is accepted too. Raises ValueError naming the
    file for a corrupt image or one without an alpha channel.
    """
    if per_category != "first":
        raise ValueError(f"load_objects: per_category must be 'first', got {per_category!r}")
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"load_objects: {str(root)!r} is not a folder (expected <folder>/<category>/<image>.png)")
    entries: list[tuple[str, Path]] = []
    subdirs = sorted(p for p in root.iterdir() if p.is_dir())
    if subdirs:
        for d in subdirs:
            files = sorted(p for p in d.iterdir() if p.is_file() and p.suffix.lower() in _IMAGE_EXTS)
            if files:
                entries.append((d.name, files[0]))
    else:
        for f in sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in _IMAGE_EXTS):
            entries.append((f.stem, f))
    if not entries:
        raise ValueError(f"load_objects: no images found under {str(root)!r}")
    images, names = [], []
    for name, f in entries:
        img = _open_image(f)
        if not _has_alpha(img):
            raise ValueError(
                f"object image {str(f)!r} has no alpha channel (mode {img.mode}); objects must be "
                "RGBA PNGs whose transparent pixels mark the background"
            )
        arr = np.asarray(img.convert("RGBA"), dtype=np.uint8)
        if not arr[..., 3].any():
            raise ValueError(f"object image {str(f)!r} is fully transparent")
        images.append(np.ascontiguousarray(arr))
        names.append(name)
    return ObjectBank(images, names, source=f"folder:{root.resolve()}")


def load_backgrounds(path: str | os.PathLike, size: int = 32) -> torch.Tensor:
    """Background images from a folder (any of png/jpg/...), centre-cropped square and resized to
    ``size``: uint8 [N, 3, size, size]. Raises ValueError naming a corrupt file."""
    from invfast.data.folder import image_to_rgb

    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"load_backgrounds: {str(root)!r} is not a folder")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in _IMAGE_EXTS)
    if not files:
        raise ValueError(f"load_backgrounds: no images found under {str(root)!r}")
    out = torch.empty(len(files), 3, size, size, dtype=torch.uint8)
    for i, f in enumerate(files):
        img = _open_image(f)
        try:  # decoded as data folders are: 16-bit and float images by what they hold
            arr = np.asarray(image_to_rgb(img), dtype=np.uint8)
        except ValueError as exc:  # NaN, or a range that tells no scale
            raise ValueError(f"cannot read image {str(f)!r}: {exc}") from exc
        h, w = arr.shape[:2]
        s = min(h, w)
        crop = arr[(h - s) // 2 : (h - s) // 2 + s, (w - s) // 2 : (w - s) // 2 + s]
        t = torch.from_numpy(np.ascontiguousarray(crop)).permute(2, 0, 1)[None].float()
        r = F.interpolate(t, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
        out[i] = r[0].round().clamp(0, 255).to(torch.uint8)
    return out


def bank_checksum(t: torch.Tensor) -> str:
    """sha256 of a background tensor (identifies it in manifests)."""
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()
