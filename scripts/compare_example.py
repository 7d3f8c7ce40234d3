"""The example of docs/compare.md, end to end: measure small fixed feature extractors on photo patches,
probe them on three downstream tasks with ``invfast probe --json``, and compare them with ``invfast compare``.

    python scripts/compare_example.py WORKDIR [--docs docs/compare]

Nine models: three fixed random conv nets (seeds 0, 1, 2), each also averaged over the 8 flips/rotations
of its input (exactly invariant to flips and 90° rotations) and fed a grayscale copy of its input
(exactly invariant to grayscale conversion, nearly so to hue and saturation). WORKDIR gets
``runs/<model>/result.json`` (what ``invfast measure`` writes), ``probes/`` (features, targets, probe JSONs),
``three/`` (the comparison of the seed-0 models) and ``nine/`` (all nine with the probe scores). ``--docs``
copies the pictures there.
Needs scikit-image (the photographs) and matplotlib. About 50 minutes on 2 busy CPU cores (half of it the 27
logistic probes); a rerun skips the runs and probes already in WORKDIR.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np
import torch

import invfast as ivf
from invfast.cli import main as cli
from invfast.demo import ConvNet, DihedralAverage, photo_patches

SIZE, N_MEASURE, N_PROBE, GRID = 32, 160, 300, 6


class GrayInput(torch.nn.Module):
    """``net`` applied to the grayscale copy of the input (ITU-R 601 luma): blind to colour except through the luma."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = 0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]
        return self.net(y.expand(-1, 3, -1, -1))


def models() -> dict[str, torch.nn.Module]:
    out = {}
    for seed in range(3):
        base = ConvNet(width=32, seed=seed).eval()
        out[f"convnet-{seed}"] = base
        out[f"convnet-d4-{seed}"] = DihedralAverage(base).eval()
        out[f"convnet-gray-{seed}"] = GrayInput(base).eval()
    return out


def probe_sets(seed: int = 1) -> dict[str, tuple[torch.Tensor, np.ndarray]]:
    """Three 4- or 5-class tasks on fresh patches: which photograph; which 90° rotation was applied;
    which hue shift (0, ±¼, ½ turn) was applied."""
    gen = np.random.default_rng(seed)
    x = photo_patches(N_PROBE, SIZE, seed=seed)
    photo = np.arange(N_PROBE) % 5  # photo_patches cycles through five photographs
    k = gen.integers(0, 4, N_PROBE)
    rotated = torch.stack([img.rot90(int(r), (-2, -1)) for img, r in zip(x, k)])
    h = gen.integers(0, 4, N_PROBE)
    hue = ivf.transforms.get("hue")
    shifts = torch.tensor([0.0, 0.25, 0.5, -0.25], dtype=torch.float64)
    all_shifts = hue.apply(x, shifts)  # [N, 4, 3, H, W]
    shifted = all_shifts[torch.arange(N_PROBE), torch.from_numpy(h)]
    return {"photo": (x, photo), "rotation": (rotated, k), "hue": (shifted, h)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work")
    ap.add_argument("--docs", default=None, help="copy the pictures into this folder")
    args = ap.parse_args()
    torch.manual_seed(0)
    work = os.path.abspath(args.work)
    nets = models()
    images = photo_patches(N_MEASURE, SIZE, seed=0)
    for name, net in nets.items():
        out = os.path.join(work, "runs", name)
        if os.path.exists(os.path.join(out, "result.json")):
            continue
        r = ivf.measure_invariance(net, images, "all", grid_size=GRID, batch_size=64, normalize=False, name=name)
        os.makedirs(out, exist_ok=True)
        r.to_json(os.path.join(out, "result.json"))
        print(f"measured {name}", file=sys.stderr)
    specs = []
    pdir = os.path.join(work, "probes")
    os.makedirs(pdir, exist_ok=True)
    for task, (x, y) in probe_sets().items():
        np.save(os.path.join(pdir, f"{task}.targets.npy"), y)
        for name, net in nets.items():
            feats, js = os.path.join(pdir, f"{name}.{task}.npy"), os.path.join(pdir, f"{name}.{task}.json")
            if not os.path.exists(js):
                with torch.no_grad():
                    np.save(feats, net(x).double().numpy())
                rc = cli(
                    [
                        "probe",
                        "--features",
                        feats,
                        "--targets",
                        os.path.join(pdir, f"{task}.targets.npy"),
                        "--task",
                        "classification",
                        "--max-iter",
                        "100",
                        "--tol",
                        "1e-3",
                        "--json",
                        js,
                    ]
                )
                if rc:
                    return rc
            specs.append(f"{name}:{task}={js}")
    runs = os.path.join(work, "runs")
    three = [
        f"{lab}={os.path.join(runs, name)}"
        for lab, name in (("convnet", "convnet-0"), ("convnet-d4", "convnet-d4-0"), ("convnet-gray", "convnet-gray-0"))
    ]
    rc = cli(["compare", *three, "--out", os.path.join(work, "three"), "--overwrite"])
    rc = rc or cli(
        [
            "compare",
            *(os.path.join(runs, n) for n in nets),
            "--out",
            os.path.join(work, "nine"),
            "--probes",
            *specs,
            "--overwrite",
        ]
    )
    if rc == 0 and args.docs:
        os.makedirs(args.docs, exist_ok=True)
        for src, dst in (
            ("three/radar.png", "radar.png"),
            ("three/heatmap.png", "heatmap.png"),
            ("three/significance.png", "significance.png"),
            ("nine/correlation.png", "correlation.png"),
        ):
            shutil.copyfile(os.path.join(work, src), os.path.join(args.docs, dst))
    return rc


if __name__ == "__main__":
    sys.exit(main())
