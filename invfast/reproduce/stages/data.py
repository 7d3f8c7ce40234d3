"""The ``data`` stage: the main Transforms-2D data (pretraining, probe, rotation-probe and
measurement images) and the probe tasks' targets, from the known latent factors of each image.

The objects are silhouettes in one shared colour by default (``data.object_style``): with the built-in
objects, each with its own colours and texture, a linear probe on colour histograms alone tells the
10 objects apart (0.79 accuracy, against 0.23 for a random network's features), so the identity
probe measured colour, which Default and Appearance pretraining are trained to discard
(docs/reproduce.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from invfast.constants import LUMA_WEIGHTS
from invfast.io import atomic_save_npy
from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import Context

__all__ = [
    "TASKS",
    "TASK_SETS",
    "ASYMMETRIC_SHAPES",
    "SILHOUETTES",
    "SILHOUETTE_HSV",
    "PALETTE_HSV",
    "silhouette_objects",
    "shared_palette_objects",
    "main_objects",
    "rotation_objects",
    "colour_targets",
    "task_set",
    "make_data",
]

#: probe tasks: name -> (kind, what the target is)
TASKS = {
    "identity": ("classification", "object identity (which of the objects), accuracy"),
    "position": ("regression", "object centre (x, y), R²"),
    "rotation": ("regression", "object rotation as (cos θ, sin θ) on the rotation set (only rotation varies), R²"),
    "colour": ("regression", "object colour: alpha-weighted mean RGB of the hue-shifted object, R²"),
}
#: the image set each task is probed on (default: 'probe'). Rotation has its own set in which only the
#: rotation varies: with position, scale and hue varying too, no model here (nor raw pixels, per
#: object) gives a linear rotation R² above 0 (docs/reproduce.md)
TASK_SETS = {"rotation": "rotation"}
#: built-in shapes without rotational symmetry (their rotation is visible in the image)
ASYMMETRIC_SHAPES = ("heart", "crescent", "arrow", "ell", "blob", "tee")
#: the silhouettes of ``object_style = 'silhouettes'``, in order: the asymmetric shapes first (the
#: rotation set uses those), then shapes whose outlines stay distinct from the others at 32 px
SILHOUETTES = (
    *ASYMMETRIC_SHAPES,
    "triangle",
    "star",
    "cross",
    "ring",
    "square",
    "ellipse",
    "pentagon",
    "sun",
    "flower",
    "diamond",
    "hexagon",
    "disc",
)
#: the one colour (HSV) every silhouette is drawn in; the data's hue shift turns it per image
SILHOUETTE_HSV = (0.0, 0.75, 0.9)


def silhouette_objects(n: int) -> Any:
    """An :class:`~invfast.synthetic.banks.ObjectBank` of the first ``n`` :data:`SILHOUETTES`: each
    built-in shape's anti-aliased alpha mask, filled with the one colour :data:`SILHOUETTE_HSV`. The
    objects differ in outline only, so nothing but shape tells them apart (no colour or texture cue)."""
    import colorsys

    from invfast.synthetic import ObjectBank, builtin_objects

    if not 1 <= n <= len(SILHOUETTES):
        raise ValueError(f"silhouette objects: 1 to {len(SILHOUETTES)} distinct shapes, asked for {n}")
    bank = builtin_objects(61)
    first = {name.split("-")[1]: i for i, name in reversed(list(enumerate(bank.names)))}
    rgb = np.round(np.array(colorsys.hsv_to_rgb(*SILHOUETTE_HSV)) * 255).astype(np.uint8)
    images = []
    for shape in SILHOUETTES[:n]:
        alpha = bank.images[first[shape]][..., 3]
        img = np.empty(alpha.shape + (4,), np.uint8)
        img[..., :3] = rgb
        img[..., 3] = alpha
        images.append(img)
    return ObjectBank(
        images, [f"silhouette-{s}" for s in SILHOUETTES[:n]], source=f"reproduce:silhouettes:{n}:hsv={SILHOUETTE_HSV}"
    )


#: the colour pair (HSV) every 'shared-palette' object is recoloured onto: one light, one dark red
PALETTE_HSV = ((0.0, 0.75, 0.95), (0.0, 0.75, 0.35))


def shared_palette_objects(ids: list[int]) -> Any:
    """The built-in objects ``ids`` recoloured onto one shared colour pair (:data:`PALETTE_HSV`).

    Each built-in object blends two colours of its own through its texture; every pixel keeps its
    position between them (the projection of its RGB on the object's first principal colour axis,
    scaled to [0, 1] between the 2nd and 98th percentile, light end first) and takes the shared pair's
    colour there. Shape and texture, as a light / dark pattern, tell the objects apart; colour does not."""
    import colorsys

    from invfast.synthetic import ObjectBank, builtin_objects

    bank = builtin_objects(max(61, max(ids) + 1))
    light, dark = (np.array(colorsys.hsv_to_rgb(*c)) for c in PALETTE_HSV)
    images = []
    for i in ids:
        im = bank.images[i].astype(np.float64) / 255.0
        rgb, alpha = im[..., :3], im[..., 3]
        px = rgb[alpha > 0.5]
        w = np.zeros(alpha.shape)
        if px.shape[0] > 1 and np.ptp(px, axis=0).max() > 0.05:
            centre = px.mean(0)
            axis = np.linalg.svd(px - centre, full_matrices=False)[2][0]
            if axis @ np.array(LUMA_WEIGHTS) > 0:
                axis = -axis  # w grows from the lighter colour to the darker one
            proj = (rgb - centre) @ axis
            lo, hi = np.percentile(px @ axis - centre @ axis, [2, 98])
            w = np.clip((proj - lo) / max(hi - lo, 1e-12), 0.0, 1.0)
        out = light * (1 - w[..., None]) + dark * w[..., None]
        images.append(np.clip(np.round(np.concatenate([out, alpha[..., None]], 2) * 255), 0, 255).astype(np.uint8))
    return ObjectBank(
        images,
        [f"palette-{bank.names[i]}" for i in ids],
        source=f"reproduce:shared-palette:{','.join(map(str, ids))}:hsv={PALETTE_HSV}",
    )


def main_objects(cfg: ReproduceConfig) -> Any:
    """The main data's objects (``objects`` of :class:`~invfast.synthetic.Transforms2D`): with
    ``object_style = 'silhouettes'`` the bank of :func:`silhouette_objects`; with 'builtin',
    ``cfg.data.objects`` built-in objects with their own colours and textures (only asymmetric shapes when
    ``cfg.data.asymmetric_objects``: their indices, else the first ``cfg.data.objects``)."""
    if cfg.data.object_style == "silhouettes":
        return silhouette_objects(cfg.data.objects)
    if not cfg.data.asymmetric_objects:
        ids = list(range(cfg.data.objects))
    else:
        from invfast.synthetic import builtin_objects

        names = builtin_objects(max(61, 3 * cfg.data.objects + 18)).names
        ids = [i for i, nm in enumerate(names) if nm.split("-")[1] in ASYMMETRIC_SHAPES][: cfg.data.objects]
    if cfg.data.object_style == "shared-palette":
        return shared_palette_objects(ids)
    return ids if cfg.data.asymmetric_objects else cfg.data.objects


def rotation_objects(cfg: ReproduceConfig) -> Any:
    """The rotation-probe set's objects: the main objects without rotational symmetry (for
    silhouettes the first ``min(objects, 6)``; the built-in style uses all main objects)."""
    if cfg.data.object_style == "silhouettes":
        return silhouette_objects(cfg.data.objects).subset(range(min(cfg.data.objects, len(ASYMMETRIC_SHAPES))))
    return main_objects(cfg)


def colour_targets(objects: Any, labels: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """Object colour of every sample: the alpha-weighted mean RGB (0..1) of the object's prototype
    after the sample's hue shift and brightness factor (the colour ops of invfast.transforms). [N, 3]"""
    from invfast.ops.color import adjust_hue, rgb_to_hsv
    from invfast.transforms import functional as F

    out = np.zeros((labels.shape[0], 3), np.float64)
    hue = torch.as_tensor(params.get("hue", np.zeros(labels.shape[0])), dtype=torch.float32)
    bright = torch.as_tensor(params.get("brightness", np.ones(labels.shape[0])), dtype=torch.float32)
    for c in np.unique(labels):
        rgba = torch.from_numpy(np.ascontiguousarray(objects.images[int(c)])).float() / 255.0  # [H, W, 4]
        rgb, alpha = rgba[..., :3].permute(2, 0, 1), rgba[..., 3]
        idx = np.nonzero(labels == c)[0]
        hsv = rgb_to_hsv(rgb)[None].expand(len(idx), -1, -1, -1)
        shifted = adjust_hue(rgb[None].expand(len(idx), -1, -1, -1), hue[idx].view(-1, 1, 1), hsv=hsv)
        shifted = F.adjust_brightness(shifted, bright[idx].view(-1, 1, 1, 1))
        w = alpha / alpha.sum()
        out[idx] = (shifted * w).sum((2, 3)).double().numpy()
    return out


def task_set(task: str) -> str:
    """The main-data split a probe task is fitted on ('probe' or 'rotation')."""
    return TASK_SETS.get(task, "probe")


#: the main data's parts: name -> (Transforms-2D split, types; None: the config's ``data.transforms``)
MAIN_SPLITS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "pretrain": ("train", None),
    "probe": ("val", None),
    "rotation": ("val", ("rotate",)),
    "measure": ("test", None),
}


def main_dataset(cfg: ReproduceConfig, name: str, objects: Any = None, backgrounds: Any = None) -> Any:
    """The Transforms-2D dataset behind main-data part ``name`` (:data:`MAIN_SPLITS`); ``objects`` and
    ``backgrounds`` when the caller already built them (:func:`main_objects` / :func:`rotation_objects`,
    ``cfg.main_backgrounds()``)."""
    from invfast.synthetic import Transforms2D

    split, transforms = MAIN_SPLITS[name]
    n = {"pretrain": cfg.data.n_pretrain, "measure": cfg.data.n_measure}.get(name, cfg.data.n_probe)
    if objects is None:
        objects = rotation_objects(cfg) if name == "rotation" else main_objects(cfg)
    return Transforms2D(
        objects=objects,
        transforms=cfg.data.transforms if transforms is None else transforms,
        size=cfg.data.size,
        n=n,
        seed=cfg.run.seed,
        split=split,
        backgrounds=cfg.main_backgrounds() if backgrounds is None else backgrounds,
    )


def pretrain_layers(cfg: ReproduceConfig) -> torch.Tensor:
    """The pretraining images before their backgrounds: premultiplied RGBA uint8 [n_pretrain, 4, size, size]
    (each image is these layers over its own background; ``data.fresh_backgrounds`` draws a new one per view)."""
    ds = main_dataset(cfg, "pretrain")
    layers = ds.generate_layers(range(ds.n))[0]
    return (layers.clamp(0, 1) * 255).round().to(torch.uint8)


def make_data(ctx: Context) -> dict[str, Any]:
    """Main Transforms-2D data: pretraining (train split), probe (val), rotation-probe (val, only
    rotation varies) and measurement (test) images, labels, latent factors and the probe targets."""
    from invfast.synthetic import Transforms2D

    cfg = ctx.cfg
    out: dict[str, Any] = {
        "objects": cfg.data.objects,
        "transforms": list(cfg.data.transforms),
        "backgrounds": cfg.data.backgrounds,
        "splits": {},
    }
    backgrounds = cfg.main_backgrounds()
    targets: dict[str, np.ndarray] = {}
    objects, rotation = main_objects(cfg), rotation_objects(cfg)
    out["object_names"] = list(Transforms2D(objects=objects, size=cfg.data.size, n=1).classes)
    for name in MAIN_SPLITS:
        ds = main_dataset(cfg, name, objects=rotation if name == "rotation" else objects, backgrounds=backgrounds)
        n = ds.n
        images, labels, params = ds.generate(range(n))
        atomic_save_npy(ctx.path("data", f"{name}_images.npy"), images.numpy())
        out["splits"][name] = {
            "split": ds.split,
            "n": n,
            "transforms": list(ds.transforms),
            "fingerprint": ds.fingerprint(),
            "classes_present": int(np.unique(labels.numpy()).size),
        }
        p = {k: v.numpy().astype(np.float64) for k, v in params.items()}
        lab = labels.numpy()
        if name == "probe":
            targets.update(
                identity=lab, position=np.stack([p["x"], p["y"]], 1), colour=colour_targets(ds.objects, lab, p)
            )
        elif name == "rotation":
            angle = np.deg2rad(p["angle"])
            targets["rotation"] = np.stack([np.cos(angle), np.sin(angle)], 1)
    for k in TASKS:
        atomic_save_npy(ctx.path("data", f"probe_target_{k}.npy"), targets[k])
    out["target_std"] = {
        k: np.asarray(targets[k], np.float64).std(0).round(6).tolist() for k in TASKS if k != "identity"
    }
    return out
