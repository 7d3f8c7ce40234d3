"""The ``data`` stage: the main Transforms-2D data (pretraining, probe, rotation-probe and
measurement images) and the probe tasks' targets, from the known latent factors of each image."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from invfast.io import atomic_save_npy
from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import Context

__all__ = ["TASKS", "TASK_SETS", "ASYMMETRIC_SHAPES", "main_objects", "colour_targets", "task_set", "make_data"]

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


def main_objects(cfg: ReproduceConfig) -> int | list[int]:
    """The main data's objects: ``cfg.objects`` built-in objects, only asymmetric shapes when
    ``cfg.asymmetric_objects`` (their indices), else the first ``cfg.objects``."""
    if not cfg.asymmetric_objects:
        return cfg.objects
    from invfast.synthetic.banks import builtin_objects

    names = builtin_objects(max(61, 3 * cfg.objects + 18)).names
    ids = [i for i, nm in enumerate(names) if nm.split("-")[1] in ASYMMETRIC_SHAPES]
    return ids[:cfg.objects]


def colour_targets(objects: Any, labels: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """Object colour of every sample: the alpha-weighted mean RGB (0..1) of the object's prototype
    after the sample's hue shift and brightness factor (the colour ops of invfast.transforms). [N, 3]"""
    from invfast.transforms import functional as F

    out = np.zeros((labels.shape[0], 3), np.float64)
    hue = torch.as_tensor(params.get("hue", np.zeros(labels.shape[0])), dtype=torch.float32)
    bright = torch.as_tensor(params.get("brightness", np.ones(labels.shape[0])), dtype=torch.float32)
    for c in np.unique(labels):
        rgba = torch.from_numpy(np.ascontiguousarray(objects.images[int(c)])).float() / 255.0  # [H, W, 4]
        rgb, alpha = rgba[..., :3].permute(2, 0, 1), rgba[..., 3]
        idx = np.nonzero(labels == c)[0]
        hsv = F.rgb_to_hsv(rgb)[None].expand(len(idx), -1, -1, -1)
        shifted = F.adjust_hue(rgb[None].expand(len(idx), -1, -1, -1), hue[idx].view(-1, 1, 1), hsv=hsv)
        shifted = F.adjust_brightness(shifted, bright[idx].view(-1, 1, 1, 1))
        w = alpha / alpha.sum()
        out[idx] = (shifted * w).sum((2, 3)).double().numpy()
    return out


def task_set(task: str) -> str:
    """The main-data split a probe task is fitted on ('probe' or 'rotation')."""
    return TASK_SETS.get(task, "probe")


def make_data(ctx: Context) -> dict[str, Any]:
    """Main Transforms-2D data: pretraining (train split), probe (val), rotation-probe (val, only
    rotation varies) and measurement (test) images, labels, latent factors and the probe targets."""
    from invfast.synthetic import Transforms2D

    cfg = ctx.cfg
    out: dict[str, Any] = {"objects": cfg.objects, "transforms": list(cfg.data_transforms), "backgrounds": cfg.backgrounds,
                           "splits": {}}
    backgrounds = cfg.main_backgrounds()
    targets: dict[str, np.ndarray] = {}
    for name, split, n, transforms in (("pretrain", "train", cfg.n_pretrain, cfg.data_transforms),
                                       ("probe", "val", cfg.n_probe, cfg.data_transforms),
                                       ("rotation", "val", cfg.n_probe, ("rotate",)),
                                       ("measure", "test", cfg.n_measure, cfg.data_transforms)):
        ds = Transforms2D(objects=main_objects(cfg), transforms=transforms, size=cfg.size, n=n, seed=cfg.seed,
                          split=split, backgrounds=backgrounds)
        images, labels, params = ds.generate(range(n))
        atomic_save_npy(ctx.path("data", f"{name}_images.npy"), images.numpy())
        out["splits"][name] = {"split": split, "n": n, "transforms": list(ds.transforms), "fingerprint": ds.fingerprint(),
                               "classes_present": int(np.unique(labels.numpy()).size)}
        p = {k: v.numpy().astype(np.float64) for k, v in params.items()}
        lab = labels.numpy()
        if name == "probe":
            targets.update(identity=lab, position=np.stack([p["x"], p["y"]], 1),
                           colour=colour_targets(ds.objects, lab, p))
        elif name == "rotation":
            angle = np.deg2rad(p["angle"])
            targets["rotation"] = np.stack([np.cos(angle), np.sin(angle)], 1)
    for k in TASKS:
        atomic_save_npy(ctx.path("data", f"probe_target_{k}.npy"), targets[k])
    out["target_std"] = {k: np.asarray(targets[k], np.float64).std(0).round(6).tolist() for k in TASKS if k != "identity"}
    return out
