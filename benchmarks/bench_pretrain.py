"""Pretraining throughput: MoCo-v2 training steps on ResNet-18-CIFAR, two views per image.

invfast: batched policy on the whole batch (one call per view) + MoCo-v2 step.
baseline: what a torchvision-style pipeline does — augment image by image (the policy called once
per image, as a Dataset's per-sample transform), then the same MoCo-v2 step.

Reports images/s of both, their ratio, and the augmentation share of the step time.
Sizes: INVFAST_BENCH_BATCH (default 256), INVFAST_BENCH_SIZE (default 32), INVFAST_BENCH_ROUNDS (default 3).
Run: python -m pytest benchmarks/bench_pretrain.py --benchmark-only -o addopts=""
"""
import os
import time

import pytest
import torch

from invfast.pretrain import MoCoV2

models = pytest.importorskip("invfast.models")
T = pytest.importorskip("invfast.transforms")

BATCH = int(os.environ.get("INVFAST_BENCH_BATCH", "256"))
SIZE = int(os.environ.get("INVFAST_BENCH_SIZE", "32"))
ROUNDS = int(os.environ.get("INVFAST_BENCH_ROUNDS", "3"))


class PerSample:
    """The baseline: the same policy applied one image at a time."""

    def __init__(self, policy):
        self.policy = policy

    def __call__(self, images, generator=None):
        views = [self.policy(images[i:i + 1], generator=generator) for i in range(images.shape[0])]
        return torch.cat([v[0] for v in views]), torch.cat([v[1] for v in views])


def _setup(aug):
    torch.manual_seed(0)
    method = MoCoV2(models.create("resnet18-cifar"), aug, queue_size=16 * BATCH)
    opt = torch.optim.SGD(method.online.parameters(), lr=0.03 * BATCH / 256, momentum=0.9, weight_decay=1e-4)
    images = (torch.rand(BATCH, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1)) * 255).to(torch.uint8)
    return method, opt, images


def _step(method, opt, images, g, times):
    t0 = time.perf_counter()
    v1, v2 = method.make_views(images, 0, g)
    t1 = time.perf_counter()
    loss = method.training_loss(v1, v2)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    times.append((t1 - t0, time.perf_counter() - t0))


def _measure(aug, rounds):
    method, opt, images = _setup(aug)
    g = torch.Generator().manual_seed(0)
    times = []
    _step(method, opt, images, g, [])  # warm-up
    for _ in range(rounds):
        _step(method, opt, images, g, times)
    aug_t = sum(a for a, _ in times) / len(times)
    step_t = sum(s for _, s in times) / len(times)
    return BATCH / step_t, aug_t / step_t, step_t


def test_pretrain_throughput(benchmark):
    policy = T.policy("default", size=SIZE)
    method, opt, images = _setup(policy)
    g = torch.Generator().manual_seed(0)
    times = []
    _step(method, opt, images, g, [])
    benchmark.pedantic(_step, args=(method, opt, images, g, times), rounds=ROUNDS, iterations=1)
    aug_t = sum(a for a, _ in times) / len(times)
    step_t = sum(s for _, s in times) / len(times)
    base_ips, base_share, base_t = _measure(PerSample(policy), ROUNDS)
    info = {"batch": BATCH, "size": SIZE, "threads": torch.get_num_threads(),
            "images_per_s": BATCH / step_t, "augment_share": aug_t / step_t, "augment_s": aug_t, "step_s": step_t,
            "baseline_images_per_s": base_ips, "baseline_augment_share": base_share,
            "speedup_vs_per_sample_augmentation": base_t / step_t}
    benchmark.extra_info.update(info)
    print("\n" + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items()))
