"""The stages of ``invfast reproduce`` (see :mod:`invfast.reproduce.pipeline`): data, MoCo-v2 pretraining,
invariance measurement, features and probes, the same-vs-different transfer experiment and the
amortised model. Each stage function takes a :class:`Context`, keeps its large outputs (images,
checkpoints, features, measurement results) under ``ctx.cache`` and returns a small JSON-able dict.

Everything built here comes from the invfast packages: ``invfast.synthetic`` (data and the
same-vs-different family), ``invfast.transforms`` (policies, colour ops), ``invfast.models``,
``invfast.pretrain`` (MoCo-v2, AI-MoCo, Trainer), ``invfast.measure_invariance`` and
``invfast.probes``. The one piece written here is the short supervised training loop of the
transfer experiment (Speicher et al. pretrain supervised on the source task; invfast.pretrain
holds only contrastive methods).
"""
from __future__ import annotations

import json
import math
import os
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
from invfast.io import atomic_save_npy, atomic_torch_save, load_verified
from invfast.reproduce.config import ReproduceConfig

#: model keys (cache names) -> labels in the report, in report order
LABELS = {"random": "Random", "default": "Default", "spatial": "Spatial", "appearance": "Appearance"}
FUSIONS = {"spa+app": ("Spa+App", ("spatial", "appearance")),
           "def+spa+app": ("Def+Spa+App", ("default", "spatial", "appearance"))}
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
TRANSFER_SOURCES = ("same", "different", "superset")
#: built-in shapes without rotational symmetry (their rotation is visible in the image)
ASYMMETRIC_SHAPES = ("heart", "crescent", "arrow", "ell", "blob", "tee")


def stage_seed(seed: int, name: str) -> int:
    """A stable 31-bit seed for stage ``name`` derived from the master seed."""
    return (zlib.crc32(f"{seed}/{name}".encode()) ^ (seed * 0x9E3779B1)) & 0x7FFFFFFF


@dataclass
class Context:
    """What every stage needs: the configuration, the cache folder and whether to show progress."""

    cfg: ReproduceConfig
    cache: str
    progress: bool = True
    _models: dict[str, torch.nn.Module] = field(default_factory=dict)

    def path(self, *parts: str) -> str:
        p = os.path.join(self.cache, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def array(self, *parts: str) -> np.ndarray:
        return np.load(os.path.join(self.cache, *parts))

    def images(self, split: str) -> torch.Tensor:
        """uint8 [N, 3, size, size] of a main-data split ('pretrain', 'probe', 'rotation', 'measure')."""
        return torch.from_numpy(self.array("data", f"{split}_images.npy"))

    def model(self, key: str) -> torch.nn.Module:
        """A frozen feature extractor in eval mode: 'random', a policy name, or 'amortised'."""
        if key not in self._models:
            self._models[key] = load_model(self, key).to(self.cfg.device)
        return self._models[key]


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 [B, 3, H, W] -> float32 normalised with ImageNet mean/std (as the policies' views)."""
    mean = torch.tensor(IMAGENET_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=images.device).view(1, 3, 1, 1)
    return (images.float() / 255.0 - mean) / std


@torch.no_grad()
def extract(model: torch.nn.Module, images: torch.Tensor, batch: int = 256) -> np.ndarray:
    """Pooled features float32 [N, D] of uint8 images [N, 3, H, W]."""
    model.eval()
    dev = next(model.parameters()).device
    with torch.no_grad():
        out = [model(normalise(images[s:s + batch].to(dev))).float().cpu() for s in range(0, images.shape[0], batch)]
    return torch.cat(out).numpy()


# ---------------------------------------------------------------------------------------------- data
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


# ---------------------------------------------------------------------------------------------- models
def _encoder(cfg: ReproduceConfig, key: str) -> torch.nn.Module:
    from invfast.models import create

    torch.manual_seed(stage_seed(cfg.seed, f"init/{key}"))
    if key == "amortised":
        return create(f"hyper-{cfg.arch}", width=cfg.width, inv_dim=2)
    return create(cfg.arch, width=cfg.width)


def load_model(ctx: Context, key: str) -> torch.nn.Module:
    """The encoder called ``key``: 'random' (seeded initialisation), a policy or 'amortised'
    (weights from the pretraining run), a transfer source 'transfer-<source>'."""
    from invfast.models import load_checkpoint

    if key == "random":
        return _encoder(ctx.cfg, "random").eval()
    if key.startswith("transfer-"):
        enc = _encoder(ctx.cfg, "transfer")
        return load_checkpoint(enc, ctx.path("transfer", f"{key[len('transfer-'):]}.pt")).eval()
    enc = _encoder(ctx.cfg, key)
    return load_checkpoint(enc, ctx.path("pretrain", key, "model.pt")).eval()


def _train_config(ctx: Context, key: str, epochs: int, n: int):
    from invfast.pretrain import TrainConfig

    cfg = ctx.cfg
    steps = epochs * (n // cfg.batch_size)
    return TrainConfig(batch_size=cfg.batch_size, epochs=epochs, lr=cfg.lr, seed=stage_seed(cfg.seed, f"train/{key}"),
                       size=cfg.size, checkpoint_every=max(10, steps // 5), log_every=max(1, min(10, steps)),
                       progress=ctx.progress, device=cfg.device)


def _fit(ctx: Context, key: str, method: Any, epochs: int) -> dict[str, Any]:
    from invfast.pretrain import ArraySource, Trainer

    cfg = ctx.cfg
    images = ctx.images("pretrain")
    out = os.path.dirname(ctx.path("pretrain", key, "model.pt"))
    tc = _train_config(ctx, key, epochs, images.shape[0])
    trainer = Trainer(method, ArraySource(images, spec=f"reproduce:pretrain:{cfg.seed}:{images.shape[0]}"), tc,
                      out=out, meta={"arch": cfg.arch, "width": cfg.width, "model": key})
    trainer.fit(resume=True)
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    losses = [r["loss"] for r in recs if "loss" in r]
    return {"model": key, "steps": trainer.total_steps, "epochs": epochs, "seed": tc.seed,
            "queue_size": int(method.queue.size), "first_loss": losses[0] if losses else None,
            "final_loss": losses[-1] if losses else None}


def pretrain_policy(ctx: Context, policy: str) -> dict[str, Any]:
    """MoCo-v2 with the Default / Spatial / Appearance policy (Ericsson et al. 2021, App. A, scaled to ``size``)."""
    from invfast import transforms as T
    from invfast.pretrain import MoCoV2, default_queue_size

    cfg = ctx.cfg
    method = MoCoV2(_encoder(cfg, policy), T.policy(policy, size=cfg.size),
                    queue_size=default_queue_size(cfg.n_pretrain, cfg.batch_size), key_momentum=cfg.key_momentum,
                    proj_dim=cfg.proj_dim, queue_seed=stage_seed(cfg.seed, f"queue/{policy}"))
    return _fit(ctx, policy, method, cfg.pretrain_epochs)


def pretrain_amortised(ctx: Context) -> dict[str, Any]:
    """AI-MoCo on a Hyper-ResNet with the K = 2 group descriptors ([1,1] default, [1,0] spatial, [0,1] appearance)."""
    from invfast.pretrain import AmortisedMoCo, default_queue_size

    cfg = ctx.cfg
    method = AmortisedMoCo(_encoder(cfg, "amortised"), descriptors="groups", size=cfg.size,
                           queue_size=default_queue_size(cfg.n_pretrain, cfg.batch_size),
                           key_momentum=cfg.key_momentum, proj_dim=cfg.proj_dim,
                           queue_seed=stage_seed(cfg.seed, "queue/amortised"))
    return _fit(ctx, "amortised", method, cfg.amortised_epochs)


# ---------------------------------------------------------------------------------------------- measurement
def reference_stats(feats: np.ndarray) -> tuple[Any, str]:
    """FeatureStats of the probe-set features (a larger reference set than the measured images, as the
    paper allows): trace shrinkage ε = 1e-6 when there are at least 4 samples per dimension, Ledoit-Wolf below."""
    from invfast.stats import FeatureStats

    shrink = "trace" if feats.shape[0] >= 4 * feats.shape[1] else "ledoit-wolf"
    stats = FeatureStats().update(torch.from_numpy(np.ascontiguousarray(feats)))
    stats.finalize(shrinkage=shrink)
    return stats, shrink


def _measure_one(ctx: Context, model: Any, name: str, file: str, stats: Any = None) -> Any:
    from invfast.measure import measure_invariance
    from invfast.measure.result import InvarianceResult

    path = ctx.path("measure", f"{file}.json")
    if os.path.exists(path):
        return InvarianceResult.from_json(path)
    r = measure_invariance(model, ctx.images("measure"), transforms=ctx.cfg.test_transforms, stats=stats,
                           grid_size=ctx.cfg.grid_size, batch_size=16, forward_batch=256, device=ctx.cfg.device,
                           state_path=ctx.path("measure", f"{file}.state"), name=name, progress=ctx.progress)
    r.to_json(path)
    return r


def measure(ctx: Context) -> dict[str, Any]:
    """Invariance of Random, Default, Spatial, Appearance to the test transforms (Table 1); the
    reference statistics of each model come from its features of the probe images."""
    from invfast import report

    results, shrinkage = [], {}
    for k in LABELS:
        stats, shrinkage[LABELS[k]] = reference_stats(ctx.array(*feature_file(k, "probe")))
        results.append(_measure_one(ctx, ctx.model(k), LABELS[k], k, stats))
    return {"files": {LABELS[k]: f"measure/{k}.json" for k in LABELS},
            "reference": {"images": "probe set", "n": ctx.cfg.n_probe, "shrinkage": shrinkage},
            "cosine": {r.model: r.means("cosine") for r in results},
            "distance": {r.model: r.means("distance") for r in results},
            "families": {t.name: t.family for t in results[0].transforms.values()},
            "best": report.significance(results)}


# ---------------------------------------------------------------------------------------------- probes
def feature_file(model: str, split: str) -> tuple[str, str]:
    """Cache path parts of ``model``'s features of a probe split ('probe' or 'rotation')."""
    return ("features", f"{model}.npy" if split == "probe" else f"{split}-{model}.npy")


def features(ctx: Context) -> dict[str, Any]:
    """Frozen features of the probe and rotation-probe images for Random, Default, Spatial, Appearance."""
    dims, sizes = {}, {}
    for split in sorted({task_set(t) for t in TASKS}):
        images = ctx.images(split)
        sizes[split] = int(images.shape[0])
        for k in LABELS:
            f = extract(ctx.model(k), images)
            if not np.isfinite(f).all():
                raise FloatingPointError(f"the {LABELS[k]} model gave non-finite features")
            atomic_save_npy(ctx.path(*feature_file(k, split)), f)
            dims[LABELS[k]] = int(f.shape[1])
    return {"dims": dims, "n": sizes["probe"], "n_per_set": sizes}


def probe_scores(x: np.ndarray, y: np.ndarray, kind: str, n_models: int, cfg: ReproduceConfig) -> dict[str, Any]:
    """``cfg.folds``-fold CV over the published grid (Ericsson et al. 2021, App. E; ``cfg.n_penalties``
    values, shifted for fusions): mean ± std over folds at the best α. Logistic fits that stopped at
    ``logistic_max_iter`` are counted (``not_converged``) rather than printed."""
    import warnings

    from invfast.probes import LogisticCV, RidgeCV, alpha_grid

    grid = alpha_grid(n_models, cfg.n_penalties)
    if kind == "classification":
        est = LogisticCV(alphas=grid, cv=cfg.folds, n_models=n_models, max_iter=cfg.logistic_max_iter)
    else:
        est = RidgeCV(alphas=grid, cv=cfg.folds, n_models=n_models)
    threads = torch.get_num_threads()
    try:
        # the solvers run many small ops; one thread avoids OpenMP overhead (10x on a loaded 2-core machine)
        torch.set_num_threads(1)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LogisticCV")
            est.fit(x, y)
    finally:
        torch.set_num_threads(threads)
    cv = est.cv_results_
    b = int(est.best_index_)
    folds = [float(cv[f"split{k}_test_score"][b]) for k in range(cfg.folds)]
    out = {"mean": float(est.best_score_), "std": float(cv["std_test_score"][b]), "best_penalty": float(est.alpha_),
           "fold_scores": folds}
    if "split0_converged" in cv:
        conv = np.stack([np.asarray(cv[f"split{k}_converged"]) for k in range(cfg.folds)], axis=1)  # [alphas, folds]
        out["not_converged"] = int(conv.size - conv.sum())
        out["not_converged_at_best"] = int(conv[b].size - conv[b].sum())
    per_target = getattr(est, "cv_scores_per_target_", None)
    if per_target is not None and np.asarray(per_target).ndim == 3:
        out["per_target"] = [float(v) for v in np.asarray(per_target).mean(1)[b]]
    return out


def probes(ctx: Context) -> dict[str, Any]:
    """Every task x (Random, Default, Spatial, Appearance, Spa+App, Def+Spa+App)."""
    from invfast.probes import fuse

    sets = {LABELS[k]: [k] for k in LABELS}
    sets.update({label: list(parts) for label, parts in FUSIONS.values()})
    out: dict[str, Any] = {}
    feats_of = {split: {k: ctx.array(*feature_file(k, split)) for k in LABELS} for split in {task_set(t) for t in TASKS}}
    for task, (kind, what) in TASKS.items():
        feats = feats_of[task_set(task)]
        y = ctx.array("data", f"probe_target_{task}.npy")
        rows = {}
        for label, parts in sets.items():
            x = feats[parts[0]] if len(parts) == 1 else fuse([feats[p] for p in parts])
            rows[label] = probe_scores(x, y, kind, len(parts), ctx.cfg)
        out[task] = {"kind": kind, "target": what, "scores": rows}
    return out


# ---------------------------------------------------------------------------------------------- transfer
def transfer_data(ctx: Context) -> dict[str, Any]:
    """Speicher's same/different-transformation family: disjoint source/target objects; sources under
    the target's transformations (same), a disjoint set (different) and their union (superset)."""
    from invfast.synthetic import Transforms2D
    from invfast.synthetic.families import same_vs_different

    cfg = ctx.cfg
    sv = same_vs_different(n_objects=cfg.transfer_objects, n_transforms=cfg.transfer_transforms, seed=cfg.seed,
                           size=cfg.size)
    superset = tuple(sv.target_transforms) + tuple(sv.other_transforms)
    sources = {"same": sv.source_same("train", n=cfg.transfer_n_source),
               "different": sv.source_different("train", n=cfg.transfer_n_source),
               "superset": Transforms2D(sv.bank.subset(sv.source_objects), superset, size=cfg.size,
                                        n=cfg.transfer_n_source, seed=cfg.seed, split="train")}
    target = sv.target("val", n=cfg.transfer_n_target)
    for name, ds in [*sources.items(), ("target", target)]:
        images, labels, _ = ds.generate(range(len(ds)))
        atomic_save_npy(ctx.path("transfer", f"{name}_images.npy"), images.numpy())
        atomic_save_npy(ctx.path("transfer", f"{name}_labels.npy"), labels.numpy())
    return {"source_objects": sv.source_objects, "target_objects": sv.target_objects,
            "target_transforms": list(sv.target_transforms), "other_transforms": list(sv.other_transforms),
            "sources": {k: list(v.transforms) for k, v in sources.items()}, "target": list(target.transforms)}


def transfer_train(ctx: Context, source: str) -> dict[str, Any]:
    """Supervised pretraining (object classification, cross-entropy, SGD with cosine decay, no
    augmentation beyond the data's own transformations) on one source; resumable per epoch."""
    cfg = ctx.cfg
    images = torch.from_numpy(ctx.array("transfer", f"{source}_images.npy"))
    labels = torch.from_numpy(ctx.array("transfer", f"{source}_labels.npy")).long()
    n_classes = int(labels.max()) + 1
    enc = _encoder(cfg, "transfer")  # the same initialisation for every source
    head = torch.nn.Linear(enc.feature_dim, n_classes)
    net = torch.nn.Sequential(enc, head).to(cfg.device)
    params = list(net.parameters())
    steps_per_epoch = images.shape[0] // cfg.batch_size
    total = cfg.transfer_epochs * steps_per_epoch
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    seed = stage_seed(cfg.seed, f"transfer/{source}")
    ckpt = ctx.path("transfer", f"{source}.ckpt")
    epoch, losses = 0, []
    if os.path.exists(ckpt):
        # tensors and plain containers only, checksum verified: a crafted file never runs code
        st = load_verified(ckpt, what="supervised-training checkpoint", fix="delete it to restart this stage")
        net.load_state_dict(st["net"])
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        epoch, losses = st["epoch"], st["losses"]
    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=epoch * steps_per_epoch, desc=f"supervised {source}", unit="step",
               disable=not ctx.progress, leave=False, dynamic_ncols=True)
    net.train()
    while epoch < cfg.transfer_epochs:
        perm = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(seed + epoch))
        tot, cnt = 0.0, 0
        for s in range(steps_per_epoch):
            idx = perm[s * cfg.batch_size:(s + 1) * cfg.batch_size]
            loss = torch.nn.functional.cross_entropy(net(normalise(images[idx].to(cfg.device))),
                                                     labels[idx].to(cfg.device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if not torch.isfinite(loss):
                raise FloatingPointError(f"supervised training on {source} diverged (loss {loss.item()})")
            tot, cnt = tot + loss.item() * len(idx), cnt + len(idx)
            bar.update(1)
        epoch += 1
        losses.append(tot / cnt)
        atomic_torch_save({"net": net.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                            "epoch": epoch, "losses": losses}, ckpt)
    bar.close()
    atomic_torch_save({"encoder": enc.state_dict(), "losses": losses}, ctx.path("transfer", f"{source}.pt"))
    os.remove(ckpt)
    with torch.no_grad():
        net.eval()
        acc = float((torch.cat([net(normalise(images[s:s + 256].to(cfg.device))).argmax(1).cpu()
                                for s in range(0, len(images), 256)])
                     == labels).float().mean())
    return {"source": source, "epochs": cfg.transfer_epochs, "steps": total, "seed": seed, "losses": losses,
            "train_accuracy": acc}


def transfer_probe(ctx: Context) -> dict[str, Any]:
    """Linear probe (object classification) on the target for each source model and Random."""
    images = torch.from_numpy(ctx.array("transfer", "target_images.npy"))
    labels = ctx.array("transfer", "target_labels.npy")
    out = {}
    for key in ("random", *TRANSFER_SOURCES):
        model = ctx.model("random") if key == "random" else load_model(ctx, f"transfer-{key}")
        out[key] = probe_scores(extract(model, images), labels, "classification", 1, ctx.cfg)
    return {"scores": out, "n_target": int(images.shape[0])}


# ---------------------------------------------------------------------------------------------- amortised
def interpolation_points(n: int) -> list[list[float]]:
    """Descriptors i(t) = (1 − t, t) from Spatial [1, 0] to Appearance [0, 1], ``n`` evenly spaced t."""
    return [[round(1.0 - t, 6), round(t, 6)] for t in np.linspace(0.0, 1.0, n).tolist()]


def amortised_interpolation(ctx: Context) -> dict[str, Any]:
    """Invariance of the amortised model as i moves from Spatial to Appearance (and at Default [1, 1])."""
    from invfast.measure import WithDescriptor

    model = ctx.model("amortised")
    points = interpolation_points(ctx.cfg.interp_points) + [[1.0, 1.0]]
    rows = []
    for i in points:
        name = f"i=({i[0]:.2f},{i[1]:.2f})"
        at_i = WithDescriptor(model, i).eval()
        file = f"amortised_{i[0]:.4f}_{i[1]:.4f}"
        stats = None
        if not os.path.exists(ctx.path("measure", f"{file}.json")):
            stats, _ = reference_stats(extract(at_i, ctx.images("probe")))
        r = _measure_one(ctx, at_i, name, file, stats)
        fam: dict[str, list[float]] = {}
        for t in r.transforms.values():
            if t.mean_cosine is not None:
                fam.setdefault(t.family, []).append(t.mean_cosine)
        rows.append({"i": i, "name": name, "cosine": r.means("cosine"),
                     "family_cosine": {f: float(np.mean(v)) for f, v in fam.items()}})
    return {"points": rows}


def amortised_learned_i(ctx: Context) -> dict[str, Any]:
    """Learn a linear head and i per task on the frozen amortised model (InvarianceProbe), i from 0.5;
    fit on the first 80% of ``ip_n`` probe images, score on the rest."""
    from invfast.probes import InvarianceProbe

    cfg = ctx.cfg
    model = ctx.model("amortised")
    n = min(cfg.ip_n, cfg.n_probe)
    cut = int(round(0.8 * n))
    out = {}
    inputs = {split: normalise(ctx.images(split)[:n]) for split in {task_set(t) for t in TASKS}}
    for task, (kind, _) in TASKS.items():
        x = inputs[task_set(task)]
        y = ctx.array("data", f"probe_target_{task}.npy")[:n]
        if kind == "classification":
            yt = torch.from_numpy(y).long()
        else:
            mu, sd = y[:cut].mean(0), y[:cut].std(0) + 1e-12
            yt = torch.from_numpy((y - mu) / sd).float()
        probe = InvarianceProbe(model, task=kind, epochs=cfg.ip_epochs, batch_size=64,
                                seed=stage_seed(cfg.seed, f"ip/{task}"))
        probe.fit(x[:cut], yt[:cut])
        out[task] = {"i": [float(v) for v in probe.i_], "score": float(probe.score(x[cut:], yt[cut:])),
                     "i_history": probe.i_history_.tolist(), "n_fit": cut, "n_test": n - cut}
    return out
