"""Did a MoCo model's projection head collapse? (issue 57)

For every seed of an `invfast reproduce` cache and every policy model pretrained there (Default, Spatial,
Appearance), loads the final checkpoint, runs the online encoder and its projection head on the seed's probe
images (eval mode, the first ``--images``) and prints per model:

- ``cos``: the mean pairwise cosine of the head's outputs (what InfoNCE compares): near 0 for a spread-out
  output, 1 when every image maps to one direction;
- ``mean share``: |mean z|² / mean |z|², how much of the outputs is one vector common to all images;
- ``alive``: hidden ReLU units of the head positive on at least one image;
- the final training loss against ln(1 + queue): a loss at that value is InfoNCE with every logit equal.

Checkpoints of a batch-normalised head (``--set pretrain.head_norm=bn``) are read too (eval mode: its running
statistics). A head whose outputs all point one way gives InfoNCE no gradient to leave that state (every key,
positive or negative, is the same vector): the loss sits at ln(1 + K) for the rest of the run and the encoder
stops learning.
The backbone's own collapse indicators (effective rank, kNN) need not show it.

    python scripts/head_check.py /work/runs/lc/run/cache            # every seed of a learning check
    python scripts/head_check.py run/cache --ratios run/results.json  # with each model's identity ratio
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys

import numpy as np
import torch

POLICIES = ("default", "spatial", "appearance")


def head_outputs(checkpoint: str, images: np.ndarray) -> dict[str, float]:
    """The collapse statistics of one MoCo checkpoint's head on ``images`` (uint8 [N, 3, H, W])."""
    from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
    from invfast.models import registry
    from invfast.pretrain.collapse import output_collapse

    ck = torch.load(checkpoint, map_location="cpu", weights_only=False)
    cfg, sd = ck["config"], ck["model"]
    enc = registry.create(cfg["arch"], width=cfg["width"])
    enc.load_state_dict({k[len("online.encoder.") :]: v for k, v in sd.items() if k.startswith("online.encoder.")})
    enc.eval()
    x = torch.from_numpy(np.array(images)).float() / 255
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    head = _head(cfg, sd)
    hidden: list[torch.Tensor] = []
    relu = next(m for m in head if isinstance(m, torch.nn.ReLU))
    relu.register_forward_pre_hook(lambda _m, a: hidden.append(a[0].clone()))
    with torch.no_grad():
        z = head(enc((x - mean) / std))
    h = hidden[0]
    return {
        **output_collapse(z),
        "alive": int((h > 0).any(0).sum()),
        "hidden": int(h.shape[1]),
        "queue": int(cfg.get("method.queue_size") or 0),
    }


def _head(cfg: dict, sd: dict) -> torch.nn.Module:
    """The online network's first projection head of a checkpoint, in eval mode (plain or batch-normalised)."""
    from invfast.pretrain.heads import ProjectionHead

    prefix = "online.heads.0."
    own = {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix)}
    norm = cfg.get("method.head_norm", "none")
    w1, w2 = own["0.weight"], own["3.weight" if norm == "bn" else "2.weight"]
    head = ProjectionHead(w1.shape[1], w1.shape[0], w2.shape[0], norm)
    head.load_state_dict(own)
    return head.eval()


def seed_folders(cache: str) -> dict[int, str]:
    """Master seed -> its cache folder (the first seed's is the cache itself, the others' ``seed-N``)."""
    from invfast.reproduce.folders import recorded_config

    with open(os.path.join(cache, "config.json"), encoding="utf-8") as f:
        saved = json.load(f)
    config = recorded_config(saved)
    if config is None:
        raise SystemExit(f"{cache}: not an invfast reproduce cache of a format this invfast reads")
    first = int(config["run.seed"])
    out = {first: cache}
    for d in glob.glob(os.path.join(cache, "seed-*")):
        out[int(os.path.basename(d)[len("seed-") :])] = d
    return dict(sorted(out.items()))


def final_loss(folder: str, model: str) -> float | None:
    path = os.path.join(folder, "stages", f"pretrain-{model}.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        rec = json.load(f)
    return (rec.get("result") or rec).get("final_loss")


def ratios(results: str | None) -> dict[tuple[int, str], tuple[float, float]]:
    if results is None:
        return {}
    from invfast.reproduce.sections.learning import under_trained

    with open(results, encoding="utf-8") as f:
        doc = json.load(f)
    out = {}
    for s, run in doc["per_seed"].items():
        for m, row in under_trained(run["stages"]).items():
            out[(int(s), m)] = (row["ratio"], row.get("se", float("nan")))
    return out


def rows(cache: str, n_images: int, results: str | None) -> list[str]:
    """Markdown rows, one per seed and policy model that has a final checkpoint."""
    learned = ratios(results)
    lines = [
        "| seed | model | identity ratio | final loss (ln(1+K)) | head cos | mean share | alive |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for seed, folder in seed_folders(cache).items():
        images = np.load(os.path.join(folder, "data", "probe_images.npy"), mmap_mode="r")[:n_images]
        for m in POLICIES:
            ck = os.path.join(folder, "pretrain", m, "checkpoint.pt")
            if not os.path.exists(ck):
                continue
            st = head_outputs(ck, images)
            loss = final_loss(folder, m)
            r = learned.get((seed, m))
            lines.append(
                f"| {seed} | {m} | {'–' if r is None else f'{r[0]:.2f} ± {r[1]:.2f}'} | "
                f"{'–' if loss is None else f'{loss:.2f}'} ({math.log(1 + st['queue']):.2f}) | {st['cos']:.3f} | "
                f"{st['mean_share']:.3f} | {st['alive']}/{st['hidden']} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache", help="an invfast reproduce cache folder")
    ap.add_argument("--images", type=int, default=512, help="probe images per seed (default 512)")
    ap.add_argument("--ratios", default=None, metavar="results.json", help="the run's results, for the ratios")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print("\n".join(rows(args.cache, args.images, args.ratios)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
