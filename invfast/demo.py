"""``invfast demo``: a minimal, exact invariance measurement on real photographs.

Patches cut from the photographs shipped with scikit-image go through exact transforms
(flips, 90° rotations, colour inversion, grayscale). Two small fixed feature extractors
are scored with the Mahalanobis distance and standardised cosine:

- ``convnet``: a fixed, randomly initialised conv net with global average pooling;
- ``convnet-d4``: the same net averaged over the 8 flips/rotations of its input, which is
  exactly invariant to flips and 90° rotations by construction (distance 0, cosine 1) but
  not to the colour transforms.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch import nn

from invfast.metrics import aggregate_scores, invariance_scores
from invfast.ops.color import luma
from invfast.significance import most_invariant
from invfast.stats import FeatureStats

EXACT_TRANSFORMS = {
    "hflip": lambda x: x.flip(-1),
    "vflip": lambda x: x.flip(-2),
    "rot90": lambda x: x.rot90(1, (-2, -1)),
    "rot180": lambda x: x.rot90(2, (-2, -1)),
    "invert": lambda x: 1.0 - x,
    "grayscale": lambda x: luma(x).expand_as(x),
}
SPATIAL = ("hflip", "vflip", "rot90", "rot180")
#: the largest patch side: the smallest photograph (chelsea) is 300 px tall
MAX_PATCH = 299


def photo_patches(n: int, size: int = 64, seed: int = 0) -> torch.Tensor:
    """``n`` random ``size``×``size`` RGB patches in [0, 1] from the photographs in skimage.data, [n, 3, size, size]."""
    try:
        from skimage import data
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("the demo needs scikit-image: pip install scikit-image") from exc
    photos = [getattr(data, name)() for name in ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry")]
    gen = np.random.default_rng(seed)
    out = np.empty((n, size, size, 3), dtype=np.float32)
    for k in range(n):
        img = photos[k % len(photos)]
        y = gen.integers(0, img.shape[0] - size)
        x = gen.integers(0, img.shape[1] - size)
        out[k] = img[y : y + size, x : x + size, :3] / 255.0
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


class ConvNet(nn.Module):
    """Fixed random conv net: 3 conv layers, ReLU, global average pooling -> [B, width]."""

    def __init__(self, width: int = 64, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        layers, c_in = [], 3
        for c_out, stride in ((width // 2, 1), (width, 2), (width, 2)):
            conv = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1)
            with torch.no_grad():
                conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen) * (2.0 / (9 * c_in)) ** 0.5)
                assert conv.bias is not None  # Conv2d has a bias by default
                conv.bias.zero_()
            layers += [conv, nn.ReLU()]
            c_in = c_out
        self.body = nn.Sequential(*layers)
        self.feature_dim = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).mean(dim=(2, 3))


class DihedralAverage(nn.Module):
    """Features averaged over the 8 flips/rotations of the input: exactly D4-invariant."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.feature_dim = net.feature_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        views = [x.rot90(k, (-2, -1)) for k in range(4)]
        views += [v.flip(-1) for v in views]
        return torch.stack([self.net(v) for v in views]).mean(0)


def run_demo(n_ref: int = 256, n_test: int = 64, size: int = 64, seed: int = 0, progress: bool = False) -> dict:
    """Scores of both extractors under every exact transform: {model: {transform: {...}}}."""
    from invfast.runtime.progress import bar

    ref = photo_patches(n_ref, size, seed)
    test = photo_patches(n_test, size, seed + 1)
    base = ConvNet(seed=seed).eval()
    models = {"convnet": base, "convnet-d4": DihedralAverage(base)}
    results: dict = {}
    cosines: dict = {name: {} for name in EXACT_TRANSFORMS}
    # the d4-averaged net runs 8 forward passes per image: count images x passes
    per_model = {"convnet": 1, "convnet-d4": 8}
    total = sum(k * (n_ref + n_test * (1 + len(EXACT_TRANSFORMS))) for k in per_model.values())
    b = bar(total, desc="demo", unit="image", disable=not progress)

    def run(model: nn.Module, name: str, x: torch.Tensor) -> torch.Tensor:
        f = model(x)
        b.update(per_model[name] * x.shape[0])
        return f

    with torch.no_grad():
        for mname, model in models.items():
            b.set_description(f"demo {mname}")
            stats = FeatureStats().update(run(model, mname, ref)).finalize()
            f_ref = run(model, mname, test)
            f_t = torch.stack([run(model, mname, fn(test)) for fn in EXACT_TRANSFORMS.values()], dim=1)  # [N, T, D]
            scores = invariance_scores(f_ref, f_t, stats)
            results[mname] = {}
            for j, tname in enumerate(EXACT_TRANSFORMS):
                dist = aggregate_scores(scores["distance"][:, j : j + 1])
                cos = aggregate_scores(scores["cosine"][:, j : j + 1])
                results[mname][tname] = {"distance": dist["mean"], "cosine": cos["mean"]}
                cosines[tname][mname] = scores["cosine"][:, j]
    b.close()
    for tname, by_model in cosines.items():
        best = most_invariant(by_model)
        for mname in models:
            results[mname][tname]["most_invariant"] = best == mname
    return results


def to_markdown(results: dict) -> str:
    names = list(EXACT_TRANSFORMS)
    head = "| model | " + " | ".join(f"{n} ({'spatial' if n in SPATIAL else 'appearance'})" for n in names) + " |"
    lines = [head, "|" + "---|" * (len(names) + 1)]
    for metric in ("cosine", "distance"):
        for mname, row in results.items():
            cells = []
            for n in names:
                mark = " •" if metric == "cosine" and row[n]["most_invariant"] else ""
                cells.append(f"{row[n][metric]:.3f}{mark}")
            lines.append(f"| {mname} ({metric}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--images", type=int, default=128, help="test patches (default 128)")
    parser.add_argument("--reference", type=int, default=256, help="reference patches for the statistics (default 256)")
    parser.add_argument("--size", type=int, default=64, help="patch side in pixels (default 64)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.images < 2 or args.reference < 2:
        raise ValueError(f"--images and --reference must be at least 2, got {args.images} and {args.reference}")
    if not 1 <= args.size <= MAX_PATCH:
        raise ValueError(
            f"--size must be from 1 to {MAX_PATCH} pixels (the patches are cut from scikit-image's photographs, "
            f"the smallest {MAX_PATCH + 1} px tall), got {args.size}"
        )
    if not 0 <= args.seed < 2**62:
        raise ValueError(f"--seed must be an integer from 0 to 2^62 - 1, got {args.seed}")
    if args.json:  # before the demo: numbers that cannot be saved are refused before they are computed
        from invfast.runtime.write_paths import check_output_file

        check_output_file(args.json, "--json", "demo.json")
    t0 = time.perf_counter()
    results = run_demo(args.reference, args.images, args.size, args.seed, progress=not args.no_progress)
    print(
        f"Invariance of two fixed extractors on {args.images} photo patches ({args.size}px), "
        f"reference statistics from {args.reference} patches."
    )
    print("cosine: 1 = invariant; distance: 0 = invariant; • = significantly most invariant (Hoeffding, Bonferroni)\n")
    print(to_markdown(results))
    print(
        f"\nconvnet-d4 averages the net over flips/90° rotations, so it must score cosine 1 / distance 0 on the "
        f"spatial columns and not on the appearance ones. ({time.perf_counter() - t0:.1f} s)"
    )
    if args.json:
        from invfast.io import atomic_write_text

        atomic_write_text(args.json, json.dumps(results, indent=2))
    return 0
