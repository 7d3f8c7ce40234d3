"""ImageNet-scale rehearsal of invariance measurement, without ImageNet and without downloads.

Two modes:

``write``: an N-image JPEG folder with ImageNet-like sizes (shorter side 200..500 px, aspect 3:4..16:9, as
in the ILSVRC val set: most images about 500x375) cut from the photographs that ship with scikit-image and
scikit-learn (random crops, scales and mirrors, JPEG quality 75..95), one subfolder per source photograph.
Parallel over a process pool; the same --seed gives the same files.

    python scripts/imagenet_rehearsal.py write --out /data/rehearsal --n 50000 --workers 16

``time``: the measurement loop on whatever device is present, with a synchronisation after each stage so
that each gets its share: decode (FolderSource workers, upload), transform (every image under every grid
parameter of each transform), forward (the backbone; bf16 + channels_last on CUDA), scoring
(invariance_scores). Prints pairs/s, the shares, and the projected time of full grids over 50 000 images.
The stage synchronisations cost a little; `invfast measure` itself does not synchronise per batch.

    python scripts/imagenet_rehearsal.py time --data /data/rehearsal --model resnet50 --device cuda \\
        --images 2048 --grid-size 16

The documented full run (docs/transforms.md, "ImageNet-scale rehearsal") is then

    invfast measure --model resnet50 --data folder:/data/rehearsal --device cuda --dtype bfloat16 \\
        --transforms all --grid-size 16 --batch-size 128 --forward-batch 1024 --crop 224 --out runs/rehearsal
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import math
import os
import sys
import time
import warnings
from typing import Any

import numpy as np

PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "motorcycle_left",
    "china",
    "flower",
)
_BANK: dict[str, np.ndarray] = {}


def _load_bank() -> dict[str, np.ndarray]:
    """The RGB uint8 photographs [H, W, 3] shipped with scikit-image / scikit-learn (those present)."""
    import skimage.data as skd
    from sklearn.datasets import load_sample_images

    bank: dict[str, np.ndarray] = {}
    for name in PHOTOS[:-2]:
        fn = getattr(skd, name, None)
        if fn is None:
            continue
        try:
            a = np.asarray(fn())
        except Exception:  # an image scikit-image would fetch over the network: skipped
            continue
        if a.ndim == 3 and a.shape[2] >= 3:
            bank[name] = np.ascontiguousarray(a[..., :3]).astype(np.uint8)
    sk = load_sample_images()
    for name, a in zip(("china", "flower"), sk.images):
        bank[name] = np.ascontiguousarray(a[..., :3]).astype(np.uint8)
    if not bank:
        raise RuntimeError("no photographs found in scikit-image / scikit-learn")
    return bank


def _init_worker() -> None:
    _BANK.update(_load_bank())


def _write_one(args: tuple[str, int, int]) -> str:
    """Image ``index`` of the folder: a random crop of a random photograph, resized to an ImageNet-like size."""
    from PIL import Image

    out, index, seed = args
    rng = np.random.default_rng([seed, index])
    names = sorted(_BANK)
    name = names[int(rng.integers(len(names)))]
    src = _BANK[name]
    H, W = src.shape[:2]
    aspect = float(np.exp(rng.uniform(math.log(3 / 4), math.log(16 / 9))))  # width / height of the output
    if rng.random() < 0.25:
        aspect = 1.0 / aspect  # portrait
    area = rng.uniform(0.3, 1.0) * H * W
    ch = int(min(H, max(16, round(math.sqrt(area / aspect)))))
    cw = int(min(W, max(16, round(ch * aspect))))
    top, left = int(rng.integers(0, H - ch + 1)), int(rng.integers(0, W - cw + 1))
    crop = src[top : top + ch, left : left + cw]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    short = int(rng.integers(200, 501))
    scale = short / min(ch, cw)
    size = (max(1, round(cw * scale)), max(1, round(ch * scale)))
    img = Image.fromarray(np.ascontiguousarray(crop)).resize(size, Image.BILINEAR)
    folder = os.path.join(out, name)
    path = os.path.join(folder, f"rehearsal_{index:08d}.JPEG")
    tmp = path + ".tmp"
    img.save(tmp, format="JPEG", quality=int(rng.integers(75, 96)))
    os.replace(tmp, path)
    return path


def write(out: str, n: int, workers: int, seed: int) -> list[str]:
    """Write ``n`` JPEGs under ``out`` (one subfolder per source photograph); returns their paths."""
    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    bank = _load_bank()
    for name in bank:
        os.makedirs(os.path.join(out, name), exist_ok=True)
    jobs = [(out, i, seed) for i in range(n)]
    if workers == 1:
        _BANK.update(bank)
        return [_write_one(j) for j in jobs]
    with cf.ProcessPoolExecutor(max_workers=workers, initializer=_init_worker) as pool:
        return list(pool.map(_write_one, jobs, chunksize=max(1, n // (workers * 8))))


# ----------------------------------------------------------------------------------------------
# timing of the measurement loop


def timing(
    data: str,
    model_name: str,
    width: int | None,
    device: str | None,
    images: int | None,
    batch_size: int,
    grid_size: int,
    transforms: str,
    resize: int,
    crop: int | None,
    workers: int,
    forward_batch: int,
    project_k: list[int],
    project_n: int,
) -> dict[str, Any]:
    """Decode / transform / forward / scoring seconds, pairs/s and projected full-grid times."""
    import torch

    import invfast as ivf
    import invfast.transforms as T
    from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
    from invfast.data import FolderSource
    from invfast.models import create
    from invfast.transforms import functional as Fn

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    names = list(T.TEST_TRANSFORMS) if transforms == "all" else [s for s in transforms.split(",") if s]
    src = FolderSource(data, resize=resize, n=images, workers=workers)
    model = (create(model_name) if width is None else create(model_name, width=width)).to(dev).eval()
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    mean = torch.tensor(IMAGENET_MEAN, device=dev).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=dev).view(1, 3, 1, 1)
    grids = {n: T.get(n).grid(grid_size) for n in names}

    def features(u8: torch.Tensor) -> torch.Tensor:
        x = u8 if crop is None else T.preprocess(u8, resize=None, crop=crop)
        x = (Fn.to_float(x) - mean) / std
        if cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        outs = []
        with torch.inference_mode(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            for s in range(0, x.shape[0], forward_batch):
                outs.append(model(x[s : s + forward_batch]).float())
        return torch.cat(outs)

    shares = {"decode": 0.0, "transform": 0.0, "forward": 0.0, "scoring": 0.0}
    per_transform = {name: 0.0 for name in names}  # transform + forward + scoring seconds of its views
    views = {name: 0 for name in names}
    pairs = 0
    stats = None
    n = len(src)
    batches = [list(range(s, min(n, s + batch_size))) for s in range(0, n, batch_size)]
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    for u8, _ok in src.batches(batches):
        u8 = u8.to(dev, non_blocking=True)
        sync()
        t1 = time.perf_counter()
        shares["decode"] += t1 - t0
        f_ref = features(u8)
        sync()
        t2 = time.perf_counter()
        shares["forward"] += t2 - t1
        if stats is None:  # reference statistics of the first batch: enough for timing the scoring
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                stats = ivf.FeatureStats().update(f_ref).finalize()
        for name in names:
            t3 = time.perf_counter()
            y = T.get(name).apply(u8, grids[name].to(dev))  # [B, P, 3, H, W]
            sync()
            t4 = time.perf_counter()
            B, P = y.shape[:2]
            f_t = features(y.reshape(B * P, *y.shape[2:])).view(B, P, -1)
            sync()
            t5 = time.perf_counter()
            ivf.invariance_scores(f_ref, f_t, stats)
            sync()
            t6 = time.perf_counter()
            shares["transform"] += t4 - t3
            shares["forward"] += t5 - t4
            shares["scoring"] += t6 - t5
            per_transform[name] += t6 - t3
            views[name] += B * P
            pairs += B * P
        t0 = time.perf_counter()
    wall = time.perf_counter() - t_all
    total = sum(shares.values())
    rate = pairs / wall
    per_view = {t: per_transform[t] / max(views[t], 1) for t in names}  # seconds per view of each transform
    decode_per_image = shares["decode"] / max(n, 1)

    def projected(k: int) -> float:
        """project_n images at grid size k: each image decoded once, and every transform's real grid at k
        (binary transforms keep 2 views, posterize at most 8) at that transform's measured cost per view."""
        return project_n * (decode_per_image + sum(len(T.get(t).grid(k)) * per_view[t] for t in names))

    return {
        "device": str(dev),
        "model": model_name,
        "images": n,
        "transforms": len(names),
        "grid_size": grid_size,
        "pairs": pairs,
        "wall_s": wall,
        "pairs_per_s": rate,
        "shares": {k: v / total for k, v in shares.items()},
        "seconds": shares,
        "per_view_ms": {t: 1e3 * v for t, v in per_view.items()},
        "decode_ms_per_image": 1e3 * decode_per_image,
        "projected_views_per_image": {k: sum(len(T.get(t).grid(k)) for t in names) for k in project_k},
        "projected_s": {k: projected(k) for k in project_k},
        "project_images": project_n,
    }


def _format(r: dict[str, Any]) -> str:
    lines = [
        f"{r['images']} images x {r['transforms']} transforms x grid {r['grid_size']} on {r['device']} "
        f"({r['model']}): {r['pairs']} pairs in {r['wall_s']:.1f} s = {r['pairs_per_s']:.0f} pairs/s",
        "shares: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in r["shares"].items()),
    ]
    slow = sorted(r["per_view_ms"].items(), key=lambda kv: -kv[1])
    lines.append(
        "per view (transform + forward + scoring), ms: "
        + ", ".join(f"{t} {ms:.3f}" for t, ms in slow)
        + f"; decode {r['decode_ms_per_image']:.2f} ms per image"
    )
    for k, s in r["projected_s"].items():
        lines.append(
            f"projected (this machine, its load, these per-view costs): {r['project_images']} images x "
            f"{r['transforms']} transforms at k={k} ({r['projected_views_per_image'][k]} views per image): "
            f"{s / 3600:.2f} h"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("write", help="write the JPEG folder")
    w.add_argument("--out", required=True)
    w.add_argument("--n", type=int, default=50_000, help="number of images (default 50 000, like ImageNet val)")
    w.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    w.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("time", help="time decode / transform / forward / scoring over a folder")
    t.add_argument("--data", required=True)
    t.add_argument("--model", default="resnet50")
    t.add_argument(
        "--width", type=int, default=None, help="model width (default: the architecture's; small for smoke runs)"
    )
    t.add_argument("--device", default=None, help="cpu | cuda (default: cuda if available)")
    t.add_argument("--images", type=int, default=None, help="first N images only")
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--forward-batch", type=int, default=512)
    t.add_argument("--grid-size", type=int, default=16)
    t.add_argument("--transforms", default="all", help="all or comma-separated names")
    t.add_argument("--resize", type=int, default=256)
    t.add_argument("--crop", type=int, default=224)
    t.add_argument("--workers", type=int, default=4, help="decode worker processes")
    t.add_argument("--project-k", default="16,64,256", help="grid sizes of the projected full runs")
    t.add_argument("--project-n", type=int, default=50_000, help="images of the projected full runs")
    a = p.parse_args(argv)
    if a.mode == "write":
        t0 = time.perf_counter()
        paths = write(a.out, a.n, a.workers, a.seed)
        print(f"wrote {len(paths)} JPEGs under {a.out} in {time.perf_counter() - t0:.1f} s")
        return 0
    crop = a.crop if a.crop and a.crop > 0 else None
    r = timing(
        a.data,
        a.model,
        a.width,
        a.device,
        a.images,
        a.batch_size,
        a.grid_size,
        a.transforms,
        a.resize,
        crop,
        a.workers,
        a.forward_batch,
        [int(k) for k in a.project_k.split(",") if k],
        a.project_n,
    )
    print(_format(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
