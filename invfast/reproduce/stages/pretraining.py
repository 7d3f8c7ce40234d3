"""The pretraining stages: MoCo-v2 with the Default / Spatial / Appearance policies and the amortised
AI-MoCo model, all through :class:`invfast.pretrain.Trainer` (checkpoints and exact resume inside a
stage, ``metrics.jsonl`` per model)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import torch

from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import AMORTISED, SIMCLR, VIT, Context, encoder, stage_seed

__all__ = [
    "Snapshots",
    "snapshot_steps",
    "policy_method",
    "amortised_method",
    "pretrain_source",
    "warm_start",
    "pretrain_policy",
    "pretrain_amortised",
    "train_config",
    "read_metrics",
    "heldout_probe",
    "learning_curve",
]


def train_config(
    ctx: Context,
    key: str,
    epochs: int,
    n: int,
    lr: float | None = None,
    weight_decay: float = 1e-4,
    warmup: float = 0.0,
    optimizer: str = "sgd",
) -> Any:
    """The :class:`invfast.pretrain.TrainConfig` of model ``key``: ``epochs`` over ``n`` images in
    batches of ``cfg.pretrain.batch_size`` with ``optimizer`` at ``lr`` (None: ``cfg.pretrain.lr``), the first
    ``warmup`` (a fraction) of its steps a linear LR warm-up, checkpoints five times per run, its seed derived
    from the master seed."""
    from invfast.pretrain import TrainConfig

    cfg = ctx.cfg
    steps = epochs * (n // cfg.pretrain.batch_size)
    return TrainConfig(
        batch_size=cfg.pretrain.batch_size,
        epochs=epochs,
        lr=cfg.pretrain.lr if lr is None else lr,
        optimizer=optimizer,
        weight_decay=weight_decay,
        warmup_steps=int(warmup * steps),
        seed=stage_seed(cfg.run.seed, f"train/{key}"),
        size=cfg.data.size,
        checkpoint_every=max(10, steps // 5),
        log_every=max(1, min(10, steps)),
        progress=ctx.progress,
        device=cfg.run.device,
    )


def read_metrics(folder: str) -> list[dict[str, Any]]:
    """The records of a training run's ``metrics.jsonl``."""
    with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def heldout_probe(ctx: Context) -> Any:
    """The periodic identity probe of the pretraining runs: the first ``pretrain.curve_images`` probe-set
    images and their object labels (:class:`invfast.pretrain.HeldoutProbe`: kNN and linear accuracy
    on a stratified half, fitted on the other half)."""
    from invfast.pretrain import HeldoutProbe

    n = min(ctx.cfg.pretrain.curve_images, ctx.cfg.data.n_probe)
    return HeldoutProbe(ctx.images("probe")[:n], ctx.array("data", "probe_target_identity.npy")[:n])


def learning_curve(records: list[dict[str, Any]], steps_per_epoch: int) -> dict[str, list[dict[str, float]]]:
    """The loss records (step, epoch, loss) and the held-out probe records (step, epoch, probe/...) of a
    run's metrics log."""
    loss = [
        {"step": r["step"], "epoch": r["step"] / steps_per_epoch, "loss": r["loss"]} for r in records if "loss" in r
    ]
    probe = [
        {
            "step": r["step"],
            "epoch": r["step"] / steps_per_epoch,
            **{k[len("probe/") :]: v for k, v in r.items() if k.startswith("probe/")},
        }
        for r in records
        if "probe/knn" in r
    ]
    return {"loss": loss, "probe": probe}


class Snapshots:
    """The held-out probe of a pretraining run that also keeps the encoder's weights each time it runs
    (``<folder>/step-<N>.pt``, contiguous): the checkpoints E4 and E5 measure. Saving reads the weights and
    draws no random number, so the run's numbers do not change."""

    def __init__(self, probe: Any, encoder: torch.nn.Module, folder: str) -> None:
        self.probe, self.encoder, self.folder = probe, encoder, folder
        self.step: Callable[[], int] = lambda: 0

    def __call__(self, *args: Any, **kw: Any) -> dict[str, float]:
        from invfast.io import atomic_torch_save
        from invfast.pretrain.memory_layout import contiguous_state

        os.makedirs(self.folder, exist_ok=True)
        state = contiguous_state(self.encoder.state_dict())
        atomic_torch_save(state, os.path.join(self.folder, f"step-{self.step()}.pt"))
        return self.probe(*args, **kw)


def snapshot_steps(ctx: Context, key: str) -> list[int]:
    """The steps at which pretraining run ``key`` kept its encoder (:class:`Snapshots`), in order."""
    folder = os.path.join(ctx.cache, "pretrain", key, "snapshots")
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return sorted(int(n[len("step-") : -len(".pt")]) for n in names if n.startswith("step-") and n.endswith(".pt"))


def pretrain_source(ctx: Context, spec: str) -> Any:
    """The pretraining images as the methods of :func:`policy_method` / :func:`amortised_method` read them: the
    images themselves, or (``data.fresh_backgrounds``) their objects' RGBA layers, each view composited anew."""
    from invfast.data import ArraySource
    from invfast.data.tensors import TensorSource
    from invfast.reproduce.stages.data import pretrain_layers

    if ctx.cfg.data.fresh_backgrounds:
        return TensorSource(pretrain_layers(ctx.cfg), spec=f"{spec}:layers")
    return ArraySource(ctx.images("pretrain"), spec=spec)


def _fit(ctx: Context, key: str, method: Any, epochs: int) -> dict[str, Any]:
    """Pretrain ``method`` as model ``key`` for ``epochs``: MoCo's SGD at ``cfg.pretrain.lr``, the transformers ('vit-'
    keys) Adam at ``cfg.vit.lr``."""
    import dataclasses

    from invfast.pretrain import Trainer

    cfg = ctx.cfg
    images = ctx.images("pretrain")
    out = os.path.dirname(ctx.path("pretrain", key, "model.pt"))
    vit = key.startswith(VIT)
    tc = train_config(
        ctx,
        key,
        epochs,
        images.shape[0],
        warmup=cfg.pretrain.warmup,
        lr=cfg.vit.lr if vit else None,
        optimizer="adam" if vit else "sgd",
    )
    steps_per_epoch = images.shape[0] // cfg.pretrain.batch_size
    probe = None
    if cfg.pretrain.curve_every:
        tc = dataclasses.replace(tc, probe_every=cfg.pretrain.curve_every * steps_per_epoch)
        probe = Snapshots(heldout_probe(ctx), method.encoder, os.path.join(out, "snapshots"))
    source = pretrain_source(ctx, f"reproduce:pretrain:{cfg.run.seed}:{images.shape[0]}")
    trainer = Trainer(
        method,
        source,
        tc,
        out=out,
        # checked on resume: the ResNet runs keep the identity they had before the transformers existed
        meta={"arch": method.encoder.arch if vit else cfg.pretrain.arch, "width": cfg.pretrain.width, "model": key},
        probe=probe,
    )
    if probe is not None:
        probe.step = lambda: trainer.step
    trainer.fit(resume=True)
    return _record(ctx, key, method, epochs, trainer.total_steps, tc.seed, out, steps_per_epoch)


def _record(
    ctx: Context, key: str, method: Any, epochs: int, steps: int, seed: int, out: str, steps_per_epoch: int
) -> dict[str, Any]:
    """What a finished pretraining run records: its size, its loss and held-out probe curves and, for a
    contrastive model, how collapsed its final head's outputs are on the held-out probe images (issue 57)."""
    curve = learning_curve(read_metrics(out), steps_per_epoch)
    losses = [r["loss"] for r in curve["loss"]]
    result = {
        "model": key,
        "steps": steps,
        "epochs": epochs,
        "seed": seed,
        "method": method.method_name,
        "queue_size": int(method.queue.size) if getattr(method, "queue", None) is not None else 0,
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "curve": curve,
    }
    if hasattr(method, "online"):
        from invfast.pretrain.collapse import head_collapse

        n = min(ctx.cfg.pretrain.curve_images, ctx.cfg.data.n_probe)
        result["head"] = head_collapse(method, ctx.images("probe")[:n], ctx.cfg.data.size)
    return result


def policy_method(cfg: ReproduceConfig, policy: str, key: str | None = None) -> Any:
    """MoCo-v2 with the Default / Spatial / Appearance policy (Ericsson et al. 2021, App. A, scaled to ``size``)
    on the encoder of model ``key`` (default: the policy's own ResNet; 'vit-<policy>': a ViT), at its seeded
    initialisation."""
    from invfast import transforms as T
    from invfast.pretrain import MoCoV2

    key = policy if key is None else key
    return MoCoV2(
        encoder(cfg, key),
        view_backgrounds(cfg, T.policy(policy, size=cfg.data.size)),
        queue_size=cfg.moco_queue_size(),
        key_momentum=cfg.pretrain.key_momentum,
        proj_dim=cfg.pretrain.proj_dim,
        head_norm=cfg.pretrain.head_norm,
        queue_seed=stage_seed(cfg.run.seed, f"queue/{key}"),
    )


def view_backgrounds(cfg: ReproduceConfig, policy: Any) -> Any:
    """``policy`` as the pretraining runs apply it: over the images, or (``data.fresh_backgrounds``) over the objects'
    layers with a fresh background per view (:class:`invfast.pretrain.backgrounds.FreshBackgrounds`)."""
    from invfast.pretrain.backgrounds import FreshBackgrounds

    return FreshBackgrounds(policy) if cfg.data.fresh_backgrounds else policy


def amortised_method(cfg: ReproduceConfig, key: str = "amortised") -> Any:
    """AI-MoCo at its seeded initialisation: on a Hyper-ResNet 'amortised' with the K = 2 group descriptors
    ([1,1] default, [1,0] spatial, [0,1] appearance) and 'amortised-k5' with the K = 5 individual switches
    (crop, flip, colour jitter, grayscale, blur; the 26 descriptors with at least two on); on a Prompt-ViT
    'vit-amortised' with the K = 2 groups. The :data:`SIMCLR` keys are AI-SimCLR on the Hyper-ResNet (in-batch
    negatives, no queue), K = 2 and K = 5 as above."""
    from invfast.pretrain import AmortisedMoCo, AmortisedSimCLR
    from invfast.pretrain.descriptors import descriptor_policies

    descriptors = "groups" if AMORTISED[key] == 2 else "individual"
    policies = [view_backgrounds(cfg, p) for p in descriptor_policies(descriptors, cfg.data.size)]
    shared: dict[str, Any] = dict(
        descriptors=descriptors, size=cfg.data.size, proj_dim=cfg.pretrain.proj_dim, head_norm=cfg.pretrain.head_norm
    )
    if key in SIMCLR:
        return AmortisedSimCLR(encoder(cfg, key), policies, **shared)
    return AmortisedMoCo(
        encoder(cfg, key),
        policies,
        queue_size=cfg.moco_queue_size(),
        key_momentum=cfg.pretrain.key_momentum,
        queue_seed=stage_seed(cfg.run.seed, f"queue/{key}"),
        **shared,
    )


def pretrain_policy(ctx: Context, policy: str, key: str | None = None) -> dict[str, Any]:
    """MoCo-v2 with one policy (:func:`policy_method`) as model ``key`` (default: the policy's name; 'vit-<policy>'
    for the ViT), ``pretrain.epochs`` epochs (the ViT ``vit.epochs``)."""
    key = policy if key is None else key
    return _fit(ctx, key, policy_method(ctx.cfg, policy, key), _epochs(ctx.cfg, key))


def _epochs(cfg: ReproduceConfig, key: str) -> int:
    """The pretraining epochs of model ``key``."""
    if key.startswith(VIT):
        return cfg.vit.epochs
    return cfg.chavhan.amortised_epochs if key in AMORTISED else cfg.pretrain.epochs


def warm_start(ctx: Context, key: str, model: torch.nn.Module) -> str | None:
    """Load the trained Default ViT into the Prompt-ViT ``model`` ('vit-amortised' with ``vit.warm_start``; the
    prompt network keeps its initialisation) and return the source's key; None (nothing loaded) otherwise. A run
    that resumes from a checkpoint replaces these weights with the checkpoint's."""
    if key != f"{VIT}amortised" or not ctx.cfg.vit.warm_start:
        return None
    source = f"{VIT}default"
    missing, unexpected = model.load_state_dict(ctx.model(source).state_dict(), strict=False)
    if unexpected or any(not k.startswith("prompt_") for k in missing):
        raise RuntimeError(
            f"the {source} model does not fit the Prompt-ViT: missing {list(missing)}, unexpected {list(unexpected)}"
        )
    return source


def pretrain_amortised(ctx: Context, key: str = "amortised") -> dict[str, Any]:
    """AI-MoCo (:func:`amortised_method`), ``chavhan.amortised_epochs`` epochs (the Prompt-ViT ``vit.epochs``); then the
    identity probe of the run (5-fold, the probe set) at the default descriptor [1, 1] for the trained model and
    for its initialisation: whether it learned, measured as the policies' learning is (their identity over
    Random's), where the held-out curve's 200 scored images leave its first and last points ±0.03 apart by
    chance."""
    method = amortised_method(ctx.cfg, key)
    warm = warm_start(ctx, key, method.encoder)
    out = _fit(ctx, key, method, _epochs(ctx.cfg, key))
    out["warm_start"] = warm
    out["identity"] = {
        "trained": _identity_probe(ctx, method.encoder, AMORTISED[key]),
        "init": _identity_probe(ctx, amortised_method(ctx.cfg, key).encoder, AMORTISED[key]),
    }
    return out


def _identity_probe(ctx: Context, encoder_: torch.nn.Module, k: int) -> dict[str, Any]:
    """The identity task's probe (:func:`~invfast.reproduce.stages.probing.probe_scores`) on an amortised
    encoder's features at the descriptor with every augmentation on ([1, 1]; [1, 1, 1, 1, 1])."""
    from invfast.measure import WithDescriptor
    from invfast.reproduce.stages.context import extract
    from invfast.reproduce.stages.probing import probe_scores

    model = WithDescriptor(encoder_, [1.0] * k).to(ctx.cfg.run.device).eval()
    y = ctx.array("data", "probe_target_identity.npy")
    return probe_scores(extract(model, ctx.images("probe")), y, "classification", 1, ctx.cfg)
