"""Pretraining throughput: MoCo-v2 training steps on ResNet-18-CIFAR, two views per image.

invfast: batched policy on the whole batch (one call per view) + MoCo-v2 step.
baseline: what a torchvision-style pipeline does — augment image by image (the policy called once
per image, as a Dataset's per-sample transform), then the same MoCo-v2 step.

Reports images/s of both, the augmentation share of the step time, the augmentation speed-up, and
the step speed-up with the (identical) model time averaged over both — the steps run interleaved,
but on a shared machine the model time still drifts, so the whole-step ratio alone is noisy.
Sizes: INVFAST_BENCH_BATCH (default 256), INVFAST_BENCH_SIZE (default 32), INVFAST_BENCH_ROUNDS (default 3).

Also: the CPU step with the networks and views stored channels-last (the Trainer's CPU default) against
the same step in PyTorch's default contiguous layout, at the reproduce --quick size (width 8, batch 64,
INVFAST_BENCH_CL_WIDTH / INVFAST_BENCH_CL_BATCH); the fused policy views (FusedPolicy, csrc/augment)
against the torch policy inside the same CPU step; and (skipped without CUDA) the augmentation share
of a ResNet-50 MoCo-v2 step at 224 px, batch
INVFAST_BENCH_GPU_BATCH (default 256), fused CUDA kernels (opted in) vs the torch path; goal <= 10 %.
Run: python -m pytest benchmarks/bench_pretrain.py --benchmark-only -o addopts=""
"""

import os
import time

import pytest
import torch

from invfast import models
from invfast import transforms as T
from invfast.pretrain import MoCoV2

BATCH = int(os.environ.get("INVFAST_BENCH_BATCH", "256"))
SIZE = int(os.environ.get("INVFAST_BENCH_SIZE", "32"))
ROUNDS = int(os.environ.get("INVFAST_BENCH_ROUNDS", "3"))


class PerSample:
    """The baseline: the same policy applied one image at a time."""

    def __init__(self, policy):
        self.policy = policy

    def __call__(self, images, generator=None):
        views = [self.policy(images[i : i + 1], generator=generator) for i in range(images.shape[0])]
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


def test_pretrain_throughput(benchmark):
    policy = T.policy("default", size=SIZE)
    ours, base = _setup(policy), _setup(PerSample(policy))
    g_ours, g_base = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    t_ours, t_base = [], []
    _step(*ours, g_ours, [])  # warm-up
    _step(*base, g_base, [])

    def interleaved():  # one step of each per round, so machine load drifts affect both alike
        _step(*ours, g_ours, t_ours)
        _step(*base, g_base, t_base)

    benchmark.pedantic(interleaved, rounds=ROUNDS, iterations=1)
    aug_o, step_o = (sum(t[i] for t in t_ours) / len(t_ours) for i in (0, 1))
    aug_b, step_b = (sum(t[i] for t in t_base) / len(t_base) for i in (0, 1))
    model_s = (step_o - aug_o + step_b - aug_b) / 2  # the model part is the same code in both
    info = {
        "batch": BATCH,
        "size": SIZE,
        "threads": torch.get_num_threads(),
        "images_per_s": BATCH / step_o,
        "augment_share": aug_o / step_o,
        "augment_s": aug_o,
        "step_s": step_o,
        "baseline_images_per_s": BATCH / step_b,
        "baseline_augment_share": aug_b / step_b,
        "baseline_augment_s": aug_b,
        "augment_speedup": aug_b / aug_o,
        "step_speedup_same_model_time": (model_s + aug_b) / (model_s + aug_o),
    }
    benchmark.extra_info.update(info)
    print("\n" + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items()))


def test_pretrain_channels_last_cpu(benchmark):
    """A MoCo-v2 CPU step (views made beforehand) with weights and views channels-last vs contiguous."""
    width = int(os.environ.get("INVFAST_BENCH_CL_WIDTH", "8"))
    batch = int(os.environ.get("INVFAST_BENCH_CL_BATCH", "64"))
    policy = T.policy("default", size=SIZE)
    images = (torch.rand(batch, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1)) * 255).to(torch.uint8)
    runs = {}
    for cl in (False, True):
        torch.manual_seed(0)
        method = MoCoV2(models.create("resnet18-cifar", width=width), policy, queue_size=16 * batch, proj_dim=64)
        if cl:
            method.to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(method.online.parameters(), lr=0.03, momentum=0.9, weight_decay=1e-4)
        views = method.make_views(images, 0, torch.Generator().manual_seed(0))
        if cl:
            views = tuple(v.contiguous(memory_format=torch.channels_last) for v in views)
        runs[cl] = (method, opt, views, [])

    def step(cl):
        method, opt, views, times = runs[cl]
        t0 = time.perf_counter()
        loss = method.training_loss(*views)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)

    for cl in (False, True):  # warm-up
        step(cl), step(cl)
        runs[cl][3].clear()

    def interleaved():
        for _ in range(5):
            step(False)
            step(True)

    benchmark.pedantic(interleaved, rounds=ROUNDS, iterations=1)
    contiguous, channels_last = (sorted(runs[cl][3])[len(runs[cl][3]) // 2] for cl in (False, True))
    info = {
        "width": width,
        "batch": batch,
        "threads": torch.get_num_threads(),
        "contiguous_step_s": contiguous,
        "channels_last_step_s": channels_last,
        "speedup": contiguous / channels_last,
    }
    benchmark.extra_info.update(info)
    print("\n" + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items()))


def test_pretrain_fused_views_cpu(benchmark):
    """The same MoCo-v2 CPU step with the fused policy views instead of the torch policy."""
    import invfast.backend as backend
    from invfast.transforms.fused import FusedPolicy

    if "augment_views" not in backend.compiled_ops():
        pytest.skip("compiled core without augment_views")
    fused, base = _setup(FusedPolicy(T.policy("default", size=SIZE))), _setup(T.policy("default", size=SIZE))
    g_f, g_b = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    t_f, t_b = [], []
    _step(*fused, g_f, [])
    _step(*base, g_b, [])

    def interleaved():
        _step(*fused, g_f, t_f)
        _step(*base, g_b, t_b)

    benchmark.pedantic(interleaved, rounds=ROUNDS, iterations=1)
    aug_f, step_f = (sum(t[i] for t in t_f) / len(t_f) for i in (0, 1))
    aug_b, step_b = (sum(t[i] for t in t_b) / len(t_b) for i in (0, 1))
    info = {
        "batch": BATCH,
        "size": SIZE,
        "fused_augment_s": aug_f,
        "torch_augment_s": aug_b,
        "augment_speedup": aug_b / aug_f,
        "fused_augment_share": aug_f / step_f,
        "torch_augment_share": aug_b / step_b,
    }
    benchmark.extra_info.update(info)
    print("\n" + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pretrain_augment_share_cuda(benchmark):
    """Augmentation share of a ResNet-50 MoCo-v2 step (bf16 autocast, channels_last) at 224 px on one GPU."""
    from invfast import backend
    from invfast.transforms.fused import FusedPolicy

    batch = int(os.environ.get("INVFAST_BENCH_GPU_BATCH", "256"))
    dev = torch.device("cuda")
    torch.manual_seed(0)
    net = models.create("resnet50").to(dev).to(memory_format=torch.channels_last)
    method = MoCoV2(net, FusedPolicy(T.policy("default", size=224)), queue_size=16 * batch).to(dev)
    opt = torch.optim.SGD(method.online.parameters(), lr=0.03, momentum=0.9)
    images = (torch.rand(batch, 3, 256, 256, device=dev) * 255).to(torch.uint8)
    g = torch.Generator().manual_seed(0)

    def timed(fused_on: bool) -> tuple[float, float]:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with backend.use("compiled" if fused_on else "reference"):
            v1, v2 = method.make_views(images, 0, g)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = method.training_loss(
                v1.contiguous(memory_format=torch.channels_last), v2.contiguous(memory_format=torch.channels_last)
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        return t1 - t0, time.perf_counter() - t0

    timed(True), timed(False)  # warm-up
    res = {True: [], False: []}
    benchmark.pedantic(
        lambda: (res[True].append(timed(True)), res[False].append(timed(False))), rounds=ROUNDS, iterations=1
    )
    info = {"batch": batch}
    for on, label in ((True, "fused_cuda"), (False, "torch_path")):
        aug_s = min(a for a, _ in res[on])
        step_s = min(s for _, s in res[on])
        info.update({f"{label}_augment_s": aug_s, f"{label}_step_s": step_s, f"{label}_augment_share": aug_s / step_s})
    benchmark.extra_info.update(info)
    print("\n" + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_trainer_reads_one_step_late_cuda(benchmark, record_ratio):
    """The Trainer's steps on one GPU with each step's loss and view timings read one step late (the default:
    the host queues the next step while the GPU finishes this one) against read at once (a wait per step), on
    ResNet-18-CIFAR at 32 px, batch 256 (a small step, where a wait per step costs most); goal > 1x."""
    from invfast.data import ArraySource
    from invfast.pretrain import TrainConfig, Trainer
    from invfast.pretrain.step_reads import StepReads

    images = (torch.rand(2048, 3, 36, 36, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8)
    steps = 40

    def run(lagged: bool) -> float:
        torch.manual_seed(0)
        method = MoCoV2(models.create("resnet18-cifar"), T.policy("default", size=32), queue_size=4096)
        config = TrainConfig(
            batch_size=256, steps=steps, size=32, lr=0.03, checkpoint_every=0, log_every=0, progress=False
        )
        t = Trainer(method, ArraySource(images), config, device="cuda")
        t._reads = StepReads(t.device, lagged=lagged)
        t.fit(until_step=5)  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        t.fit()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    at_once = min(run(False) for _ in range(2))
    benchmark.pedantic(lambda: run(True), rounds=2, iterations=1)
    record_ratio("trainer on cuda: steps read at once / one step late", at_once, "> 1x")
