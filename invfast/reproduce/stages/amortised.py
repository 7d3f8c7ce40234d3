"""The amortised stages (Chavhan et al. 2023): the AI-MoCo model's invariance as its descriptor i
moves from Spatial to Appearance (``amortised-interpolation``) and i learned per task with a linear
head (``amortised-learned-i``, :class:`invfast.probes.InvarianceProbe`). The model itself is trained
by :func:`invfast.reproduce.stages.pretraining.pretrain_amortised`."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch

from invfast.io import atomic_write_text
from invfast.reproduce.stages.context import VIT, Context, extract, normalise, stage_seed
from invfast.reproduce.stages.data import TASKS, task_set
from invfast.reproduce.stages.few_shot import few_shot_fixed, few_shot_learned_i, learned_i_probe
from invfast.reproduce.stages.measurement import measure_one, per_image_cosines, reference_stats

__all__ = [
    "interpolation_points",
    "amortised_interpolation",
    "prompt_effect",
    "amortised_learned_i",
    "amortised_cost",
    "amortised_downstream",
    "competition_ranks",
]


def interpolation_points(n: int) -> list[list[float]]:
    """Descriptors i(t) = (1 − t, t) from Spatial [1, 0] to Appearance [0, 1], ``n`` evenly spaced t."""
    return [[round(1.0 - t, 6), round(t, 6)] for t in np.linspace(0.0, 1.0, n).tolist()]


def _interpolation_point(ctx: Context, model: torch.nn.Module, file_key: str, i: list[float]) -> dict[str, Any]:
    """The amortised ``model``'s invariance at descriptor ``i``: per test transform (mean and per measurement image)
    and per family; reference statistics from its own probe-set features at i. Measurement cached as ``file_key``."""
    from invfast.measure import WithDescriptor

    name = f"i=({i[0]:.2f},{i[1]:.2f})"
    at_i = WithDescriptor(model, i).eval()
    file = f"{file_key}_{i[0]:.4f}_{i[1]:.4f}"
    stats = None
    if not os.path.exists(ctx.path("measure", f"{file}.json")):
        stats, _ = reference_stats(extract(at_i, ctx.images("probe")))
    r = measure_one(ctx, at_i, name, file, stats)
    fam: dict[str, list[float]] = {}
    for t in r.transforms.values():
        if t.mean_cosine is not None:
            fam.setdefault(t.family, []).append(t.mean_cosine)
    return {
        "i": i,
        "name": name,
        "cosine": r.means("cosine"),
        "family_cosine": {f: float(np.mean(v)) for f, v in fam.items()},
        "per_image_cosine": per_image_cosines(r),
    }


def amortised_interpolation(ctx: Context, key: str = "amortised") -> dict[str, Any]:
    """Invariance of the amortised model ``key`` as i moves from Spatial to Appearance (and at Default [1, 1]), and
    C1's control: its initialisation (the same seeded encoder before training — for a warm-started Prompt-ViT, the
    trained Default ViT it starts from) at the two corners [1, 0] and [0, 1]."""
    from invfast.reproduce.stages.context import encoder
    from invfast.reproduce.stages.pretraining import warm_start

    model = ctx.model(key)
    points = interpolation_points(ctx.cfg.chavhan.interp_points) + [[1.0, 1.0]]
    rows = [_interpolation_point(ctx, model, key, i) for i in points]
    init = encoder(ctx.cfg, key)
    warm_start(ctx, key, init)  # the warm-started Prompt-ViT starts from the trained Default ViT
    init = init.to(ctx.cfg.run.device).eval()
    corners = [_interpolation_point(ctx, init, f"{key}_init", i) for i in ([1.0, 0.0], [0.0, 1.0])]
    return {"points": rows, "init": {"points": corners}, "prompt_effect": prompt_effect(ctx, model)}


def prompt_effect(ctx: Context, model: torch.nn.Module) -> dict[str, Any]:
    """How much the descriptor moves the features (C7: is the prompt ignored?): per probe image,
    ‖f(x, [1, 0]) − f(x, [0, 1])‖ over the mean of the two features' norms (``per_image``), and its mean."""
    from invfast.measure import WithDescriptor

    images = ctx.images("probe")
    a = extract(WithDescriptor(model, [1.0, 0.0]).eval(), images).astype(np.float64)
    b = extract(WithDescriptor(model, [0.0, 1.0]).eval(), images).astype(np.float64)
    scale = (np.linalg.norm(a, axis=1) + np.linalg.norm(b, axis=1)) / 2
    rel = np.linalg.norm(a - b, axis=1) / np.maximum(scale, 1e-12)
    return {"per_image": [float(v) for v in rel], "mean": float(rel.mean())}


def amortised_learned_i(ctx: Context, key: str = "amortised", restarts: int | None = None) -> dict[str, Any]:
    """Learn a linear head and i per task on the frozen amortised model ``key`` (InvarianceProbe), i from 0.5;
    fit on the first 80% of ``chavhan.ip_n`` probe images, score on the rest. ``restarts`` (default
    ``chavhan.ip_restarts``) restarts per task, each its own seed, the first from i = 0.5 and the others from a seeded
    start in [0.1, 0.9] (every component); each also scores a head fitted the same way with i fixed at (0.5, 0.5)
    (``score_at_half``: what learning i adds). The task's top-level ``i``, ``score`` and ``i_history`` are the first
    restart's."""
    cfg = ctx.cfg
    n_restarts = cfg.chavhan.ip_restarts if restarts is None else restarts
    model = ctx.model(key)
    n = min(cfg.chavhan.ip_n, cfg.data.n_probe)
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
        fits = []
        for r in range(n_restarts):
            seed = stage_seed(cfg.run.seed, f"ip/{task}" if r == 0 else f"ip/{task}/{r}")
            start = 0.5 if r == 0 else float(np.random.default_rng(seed).uniform(0.1, 0.9))
            probe = learned_i_probe(model, kind, x[:cut], yt[:cut], cfg, seed, start)
            row = {
                "start": start,
                "i": [float(v) for v in probe.i_],
                "score": float(probe.score(x[cut:], yt[cut:])),
                "i_history": probe.i_history_.tolist(),
            }
            if n_restarts > 1:
                half = learned_i_probe(model, kind, x[:cut], yt[:cut], cfg, seed, 0.5, lr_i=0.0)
                row["score_at_half"] = float(half.score(x[cut:], yt[cut:]))
            fits.append(row)
        out[task] = {**fits[0], "n_fit": cut, "n_test": n - cut}
        if n_restarts > 1:
            out[task]["restarts"] = fits
    atomic_write_text(ctx.path("amortised", f"{key}-learned_i.json"), json.dumps(out))
    return out


def amortised_cost(ctx: Context) -> dict[str, Any]:
    """C6: wall time per epoch and parameters of the amortised model (AI-MoCo on the Hyper-ResNet) and of each
    specialist (MoCo-v2 with one policy), trained here on the run's data and batch after one warm-up step each:
    ``chavhan.cost_epochs`` whole epochs per model, the models taking turns epoch by epoch so that a change in the
    machine's load falls on all (``epoch_seconds``, one per epoch); or, with ``chavhan.cost_epochs`` 0,
    ``chavhan.cost_steps`` steps once. ``seconds_per_step``: the median epoch over its steps; ``training_seconds``
    that times the steps each model is configured for (``chavhan.amortised_epochs``, ``pretrain.epochs``)."""
    import time

    from invfast.pretrain import TrainConfig, Trainer
    from invfast.reproduce.stages.context import POLICIES
    from invfast.reproduce.stages.pretraining import amortised_method, policy_method, pretrain_source

    cfg = ctx.cfg
    data = pretrain_source(ctx, f"reproduce:cost:{cfg.run.seed}")
    steps_per_epoch = len(data) // cfg.pretrain.batch_size
    rounds, per_round = (
        (cfg.chavhan.cost_epochs, steps_per_epoch) if cfg.chavhan.cost_epochs else (1, cfg.chavhan.cost_steps)
    )
    warm = 1

    def trainer_of(method: Any) -> Any:
        tc = TrainConfig(
            batch_size=cfg.pretrain.batch_size,
            steps=warm + rounds * per_round,
            lr=cfg.pretrain.lr,
            seed=stage_seed(cfg.run.seed, "cost"),
            size=cfg.data.size,
            checkpoint_every=0,
            log_every=0,
            progress=False,
            device=cfg.run.device,
        )
        trainer = Trainer(method, data, tc)
        trainer.fit(until_step=warm)
        return trainer

    models = {p: policy_method(cfg, p) for p in POLICIES}
    models["amortised"] = amortised_method(cfg)
    trainers = {key: trainer_of(method) for key, method in models.items()}
    seconds: dict[str, list[float]] = {key: [] for key in models}
    for r in range(rounds):
        for key, trainer in trainers.items():
            t0 = time.perf_counter()
            trainer.fit(until_step=warm + (r + 1) * per_round)
            seconds[key].append(time.perf_counter() - t0)
    epochs = {**{p: cfg.pretrain.epochs for p in POLICIES}, "amortised": cfg.chavhan.amortised_epochs}
    out: dict[str, Any] = {}
    for key, method in models.items():
        s = float(np.median(seconds[key])) / per_round
        out[key] = {
            "seconds_per_step": s,
            "steps": epochs[key] * steps_per_epoch,
            "parameters": int(sum(p.numel() for p in method.encoder.parameters())),
            "training_seconds": s * epochs[key] * steps_per_epoch,
        }
        if cfg.chavhan.cost_epochs:
            out[key].update(epoch_seconds=seconds[key], steps_per_epoch=steps_per_epoch)
    timed = {"timed_epochs": rounds} if cfg.chavhan.cost_epochs else {"timed_steps": per_round}
    return {"models": out, **timed, "threads": cfg.run.threads}


#: amortised model key -> its row in the downstream tables
AI_LABELS = {
    "amortised": "AI (learned i)",
    "amortised-k5": "AI K=5 (learned i)",
    f"{VIT}amortised": "AI (learned i)",
    "amortised-simclr": "AI-SimCLR (learned i)",
    "amortised-simclr-k5": "AI-SimCLR K=5 (learned i)",
}


def competition_ranks(scores: dict[str, dict[str, dict[str, float]]]) -> dict[str, list[float]]:
    """Per model, its rank (1 = best; ties share the better rank) in each (task, setting) of
    ``scores[task][model][setting]``, in task-then-setting order."""
    ranks: dict[str, list[float]] = {}
    for per_model in scores.values():
        for setting in next(iter(per_model.values())):
            vals = {m: per_model[m][setting] for m in per_model}
            for m, v in vals.items():
                ranks.setdefault(m, []).append(1.0 + sum(1 for o in vals.values() if o > v))
    return ranks


def _downstream_features(
    ctx: Context, task: str, learned: dict[str, Any], family: str, fixed: bool
) -> dict[str, np.ndarray]:
    """Features [N, D] of ``task``'s probe images by row label: the policy models (``fixed``; the run's feature
    files) and each amortised model of ``learned`` at the i learned for the task."""
    from invfast.measure import WithDescriptor
    from invfast.reproduce.stages.context import LABELS, POLICIES
    from invfast.reproduce.stages.probing import feature_file

    split = task_set(task)
    feats = {LABELS[p]: ctx.array(*feature_file(family + p, split)) for p in POLICIES} if fixed else {}
    for key, rec in learned.items():
        at_i = WithDescriptor(ctx.model(key), rec[task]["i"]).eval()
        feats[AI_LABELS[key]] = extract(at_i, ctx.images(split))
    return feats


def _few_shot_of(ctx: Context, key: str | None, task: str, x: np.ndarray, y: np.ndarray, seed: int) -> dict[str, list]:
    """Per few-shot setting of ``task``, per-episode scores on its first ``chavhan.fewshot_n`` probe images: of the
    fixed features ``x``, or (``key``) of that amortised model with i learned per episode."""
    kind = TASKS[task][0]
    n = ctx.cfg.chavhan.fewshot_n or len(y)
    if key is None:
        return few_shot_fixed(x[:n], y[:n], kind, ctx.cfg, seed)
    images = ctx.images(task_set(task))[:n]
    return few_shot_learned_i(ctx.model(key), images, y[:n], kind, ctx.cfg, seed, ctx.progress)


def amortised_downstream(
    ctx: Context, keys: tuple[str, ...] = ("amortised",), family: str = "", fixed: bool = True, few_shot: bool = True
) -> dict[str, Any]:
    """C4 (and C5 with ``keys`` the K = 2 and K = 5 models, ``fixed`` and ``few_shot`` off): each amortised model
    against the Default, Spatial and Appearance models on every task — the run's many-shot probe at the i learned
    per task (``amortised-learned-i``; its out-of-fold predictions and the targets in ``probes[task]``, which the
    rules resample by image), few-shot identity episodes (5-way 1- and 5-shot, ``chavhan.fewshot_episodes`` episodes,
    ridge on the support set, Chavhan et al. App. A.2) and few-shot regression (train fractions 0.05 and 0.2,
    ``chavhan.fewshot_splits`` splits), the amortised models with i learned per episode on its support set (per split on
    its train part: :mod:`invfast.reproduce.stages.few_shot`), each episode's score in ``few_shot[task][setting]
    [label]`` — and each model's rank per (task, setting), 1 = best.

    With ``family`` 'vit-' (C7) the policy models are the transformers, and the result also holds the identity
    probes of each of them and of the untrained ViT (``identity``: whether they learned)."""
    from invfast.reproduce.stages.context import POLICIES
    from invfast.reproduce.stages.probing import feature_file, probe_scores

    cfg = ctx.cfg
    learned = {}
    for key in keys:
        with open(os.path.join(ctx.cache, "amortised", f"{key}-learned_i.json"), encoding="utf-8") as f:
            learned[key] = json.load(f)  # written by amortised-learned-i (for key)
    scores: dict[str, dict[str, dict[str, float]]] = {}
    probes: dict[str, dict[str, Any]] = {}
    episodes: dict[str, dict[str, dict[str, list]]] = {}
    keys_of = {AI_LABELS[k]: k for k in keys}
    for task, (kind, _) in TASKS.items():
        y = ctx.array("data", f"probe_target_{task}.npy")
        seed = stage_seed(cfg.run.seed, f"few-shot/{task}")
        probes[task] = {"kind": kind, "y": y.tolist(), "scores": {}}
        for model, x in _downstream_features(ctx, task, learned, family, fixed).items():
            many = probe_scores(x, y, kind, 1, cfg)
            probes[task]["scores"][model] = many
            scores.setdefault(task, {})[model] = {"many-shot": many["mean"]}
            if not few_shot:
                continue
            few = _few_shot_of(ctx, keys_of.get(model), task, x, y, seed)
            for setting, v in few.items():
                episodes.setdefault(task, {}).setdefault(setting, {})[model] = v
                scores[task][model][setting] = float(np.mean(v))
    ranks = competition_ranks(scores)
    out = {
        "scores": scores,
        "probes": probes,
        **({"few_shot": episodes, "few_shot_i": "per episode"} if few_shot else {}),
        "ranks": ranks,
        "mean_rank": {m: float(np.mean(r)) for m, r in ranks.items()},
        "learned_i": {AI_LABELS[k]: {t: learned[k][t]["i"] for t in TASKS} for k in keys},
    }
    if family:
        from invfast.reproduce.stages.context import LABELS

        y = ctx.array("data", "probe_target_identity.npy")
        x = ctx.array(*feature_file(f"{family}random", task_set("identity")))
        out["identity"] = {
            "random": probe_scores(x, y, "classification", 1, cfg),
            "models": {family + p: probes["identity"]["scores"][LABELS[p]] for p in POLICIES},
        }
    return out
