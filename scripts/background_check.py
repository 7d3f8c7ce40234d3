"""What do the `--quick` MoCo models tell their images apart by: the object or the background? (issue 56)

For each seed of a finished `invfast reproduce` cache, and each of its policy models (and the random
initialisation), takes the first ``--n`` pretraining images apart into the transformed object (premultiplied
RGBA) and the image's own background, and scores *instance discrimination* under the model's own policy: two
independently augmented views of each image, the first view's features matched to every second view by cosine
similarity, top-1 accuracy (chance 1/n). Three inputs:

- ``image``: the pretraining image itself (what MoCo trained on);
- ``background``: the image's background alone, no object;
- ``object``: the object alone, each view on its own freshly drawn background, so nothing but the object is
  shared between the two views.

A model that learned the object scores ``object`` well above chance; one that matches images by the background
scores ``background`` near ``image`` and ``object`` near chance. The random initialisation is scored under each
policy as the untrained baseline.

    python scripts/background_check.py /tmp/bg/before-cache            # every seed in the cache
    python scripts/background_check.py /tmp/bg/before-cache --n 1024 --json /tmp/bg/before.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import torch

POLICIES = ("default", "spatial", "appearance")
INPUTS = ("image", "background", "object")


def seed_configs(cache: str) -> list[tuple[str, Any]]:
    """(cache folder of the seed, its ReproduceConfig) for every seed of a reproduce cache."""
    from invfast.reproduce.folders import recorded_config
    from invfast.reproduce.presets import preset

    with open(os.path.join(cache, "config.json")) as f:
        saved = json.load(f)
    values = recorded_config(saved)
    if values is None:
        raise SystemExit(f"{cache}: not an invfast reproduce cache of a format this invfast reads")
    name = values.pop("run.preset")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    cfg = preset(name, values)
    out = [(cache, cfg)]
    for j in range(1, cfg.run.seeds):
        out.append((os.path.join(cache, f"seed-{cfg.run.seed + j}"), cfg.with_values({"run.seed": cfg.run.seed + j})))
    return out


def pretraining_layers(cfg: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` pretraining images as (objects float32 [n, 4, S, S], backgrounds uint8 [n, 3, S, S])."""
    from invfast.reproduce.stages.data import main_dataset

    objects, backgrounds, _, _ = main_dataset(cfg, "pretrain").generate_layers(range(n))
    return objects, backgrounds


@torch.no_grad()
def top1(model: torch.nn.Module, v1: torch.Tensor, v2: torch.Tensor, batch: int = 256) -> float:
    """Share of rows of ``v1`` whose most cosine-similar row of ``v2`` is their own (views [n, 3, S, S])."""
    model.eval()
    f1 = torch.cat([model(v1[s : s + batch]) for s in range(0, v1.shape[0], batch)])
    f2 = torch.cat([model(v2[s : s + batch]) for s in range(0, v2.shape[0], batch)])
    sim = torch.nn.functional.normalize(f1.float(), dim=1) @ torch.nn.functional.normalize(f2.float(), dim=1).T
    return float((sim.argmax(1) == torch.arange(sim.shape[0])).double().mean())


def views(policy: Any, what: str, objects: torch.Tensor, backgrounds: torch.Tensor, g: torch.Generator) -> Any:
    """The two views of input ``what`` (:data:`INPUTS`) under ``policy``."""
    from invfast.ops.synth import composite

    n, idx = objects.shape[0], torch.arange(objects.shape[0])
    if what == "image":
        x1 = x2 = composite(objects, backgrounds, idx)
    elif what == "background":
        x1 = x2 = backgrounds
    else:
        fresh = [torch.randint(0, 256, backgrounds.shape, generator=g, dtype=torch.uint8) for _ in range(2)]
        x1, x2 = (composite(objects, b, idx) for b in fresh)
    assert x1.shape[0] == n
    return policy.view(x1, generator=g), policy.view(x2, generator=g)


def score_seed(folder: str, cfg: Any, n: int) -> dict[str, dict[str, float]]:
    """{model row: {input: top-1}} for one seed's cache folder."""
    from invfast import transforms as T
    from invfast.reproduce.stages.context import Context

    ctx = Context(cfg, folder, progress=False)
    objects, backgrounds = pretraining_layers(cfg, n)
    rows: dict[str, dict[str, float]] = {}
    for model_key in ("random", *POLICIES):
        for pol in POLICIES if model_key == "random" else (model_key,):
            policy = T.policy(pol, size=cfg.data.size)
            g = torch.Generator().manual_seed(1234)
            model = ctx.model(model_key)
            name = f"random ({pol} views)" if model_key == "random" else model_key
            rows[name] = {w: top1(model, *views(policy, w, objects, backgrounds, g)) for w in INPUTS}
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache", help="a finished invfast reproduce cache (its policy models pretrained)")
    ap.add_argument("--n", type=int, default=1024, help="pretraining images scored (chance is 1/n)")
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    out: dict[str, Any] = {"n": args.n, "per_seed": {}}
    print(f"top-1 instance discrimination over n = {args.n} pretraining images (chance {1 / args.n:.4f})\n")
    print("| seed | model | " + " | ".join(INPUTS) + " |")
    print("|---|---|" + "---:|" * len(INPUTS))
    for folder, cfg in seed_configs(args.cache):
        rows = score_seed(folder, cfg, args.n)
        out["per_seed"][str(cfg.run.seed)] = rows
        for name, r in rows.items():
            print(f"| {cfg.run.seed} | {name} | " + " | ".join(f"{r[w]:.3f}" for w in INPUTS) + " |")
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
