"""invfast's per-layer invariance measurement against tmeasures 1.2.11 (F. Quiroga's ``tmeasures``, the one other
per-layer invariance package), on the same views (issue 42, speed part).

What is compared: tmeasures's ``NormalizedVarianceInvariance`` (every C x H x W activation of a layer its own unit,
its default ``NoTransformation``) against ``invfast.measure_invariance(..., units="elements")``, whose
``normalized_variance`` is the same measure by construction. Both see the same tensors: the images are float 0..1,
invfast runs with ``normalize=False``, and tmeasures's transformation set holds one member per view invfast makes
-- invfast's own ``rotation`` at each parameter of ``grid(k)`` (the identity, 0 degrees, is one of them), applied
to the float image. Before any timing each test checks that the two packages' per-layer means over live units
agree within 1e-6 relative (and the dead units are the same), so the ratio compares like with like. invfast's
time also includes what tmeasures does not compute (the reference statistics and the whitened distance/cosine
scores of the pooled features).

Jobs (16 rotations, CPU, torch's default thread count, batches of 256 images per model call for both):

* ``conv4``: a 4-block conv net (conv 3x3 + ReLU: 3 -> 16 -> 32 -> 64 -> 64 channels, strides 1, 2, 2, 2), 32 px,
  N = 500 photographs; the four blocks' outputs as layers (tmeasures: ``AutoActivationsModule`` filtered to the
  ReLUs) -- goal >= 3x tmeasures;
* ``resnet18``: ``invfast.models.create('resnet18')`` (ImageNet stem) at 64 px, N = 128; its four stages
  ``layer1`` .. ``layer4`` (tmeasures: an ``ActivationsModule`` with hooks on the same modules) -- goal >= 3x;
* ``every-leaf``: tmeasures's default use, ``AutoActivationsModule`` on every leaf module of the conv net (4 convs,
  4 ReLUs, the pooling: 9 layers), against invfast with the same leaf paths as ``layers=`` -- goal >= 3x.

Each job runs quiet and beside one CPU-bound process (``competing_process``); each package is run once as a
warm-up (these runs give the numbers compared), then tmeasures and invfast alternate, 2 rounds each, and the best
time of each is kept; recorded: tmeasures time / invfast time. Images: random crops of scikit-image's photographs
(``bench_measure._photo_crops``, seed 0), resized; weights from ``torch.manual_seed(0)``.
``INVFAST_BENCH_SMALL=1``: N = 32 (conv net) / 8 (ResNet-18), 8 rotations, one round.

Needs tmeasures beside invfast (skipped otherwise): ``pip install --no-deps tmeasures==1.2.11 statsmodels patsy``
(or a folder holding them on ``PYTHONPATH``). Run:

    PYTHONPATH=/tmp/tmdeps python -m pytest benchmarks/bench_tmeasures.py --benchmark-only -o addopts="" -s
"""

from __future__ import annotations

import copy
import importlib.metadata
import os
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from bench_measure import _photo_crops
from conftest import SMALL
from torch import nn

INSTALL = "pip install --no-deps tmeasures==1.2.11 statsmodels patsy"
try:
    import tmeasures.pytorch as tmp

    MISSING = ""
except Exception as e:  # not installed, or its import chain (statsmodels, patsy, ...) is missing
    MISSING = f"tmeasures is not importable ({type(e).__name__}: {e}); `{INSTALL}` to compare with it"
    # the base classes the adapters below derive from, so that the jobs are collected (and skipped)
    tmp = types.SimpleNamespace(PyTorchTransformation=nn.Module, ActivationsModule=nn.Module)

import invfast.transforms as T
from invfast import models
from invfast.measure import measure_invariance
from invfast.measure.layers import resolve_layers

K = 8 if SMALL else 16  #: rotations, the identity included: the views of each image
CONV_N, CONV_PX = (32 if SMALL else 500), 32
RESNET_N, RESNET_PX = (8 if SMALL else 128), 64
ROUNDS = 1 if SMALL else 2  #: timed rounds of each package after the warm-up
BATCH = 256  #: images per model call, both packages
RTOL = 1e-6  #: per-layer mean normalized variance, invfast vs tmeasures, relative
GOAL = ">= 3x"

pytestmark = [
    pytest.mark.skipif(bool(MISSING), reason=MISSING),
    pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true:UserWarning"),  # tmeasures's loaders
    pytest.mark.filterwarnings("ignore:.*the covariance is rank-deficient:RuntimeWarning"),  # N <= D at SMALL
]


@pytest.fixture(autouse=True)
def _at_default_threads(default_threads):
    """Every benchmark here runs at torch's default thread count (what a user gets)."""


@pytest.fixture(params=["quiet", "loaded"])
def load(request) -> str:
    """``quiet``: the machine as it is; ``loaded``: one CPU-bound process beside the benchmark."""
    if request.param == "loaded":
        request.getfixturevalue("competing_process")
    return request.param


# ---------------------------------------------------------------------------------------------- models and data
class ConvNet4(nn.Module):
    """4 blocks of conv 3x3 + ReLU (3 -> 16 -> 32 -> 64 -> 64 channels, strides 1, 2, 2, 2), global average pooling.
    The ReLUs are not in place: tmeasures keeps each hooked output as it is (``detach()``, the same storage)."""

    def __init__(self) -> None:
        super().__init__()
        chans, strides = (3, 16, 32, 64, 64), (1, 2, 2, 2)
        self.blocks = nn.Sequential(
            *(
                nn.Sequential(nn.Conv2d(chans[i], chans[i + 1], 3, stride=strides[i], padding=1), nn.ReLU())
                for i in range(4)
            )
        )
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.blocks(x)).flatten(1)


def _images(n: int, size: int) -> torch.Tensor:
    """float32 [n, 3, size, size] in 0..1: crops of the bundled photographs (deterministic)."""
    return _photo_crops(n, size, seed=0).float().div_(255.0)


class _Images(torch.utils.data.Dataset):
    """The map-style dataset tmeasures iterates: one [3, H, W] image per index."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x[i]


class _InvfastView(tmp.PyTorchTransformation):
    """One of invfast's views as a tmeasures transformation: ``t.apply`` at one grid parameter, on one image."""

    def __init__(self, t: Any, param: torch.Tensor) -> None:
        nn.Module.__init__(self)
        self.t, self.param = t, param

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.t.apply(x[None], self.param)[0, 0]

    def parameters(self) -> torch.Tensor:  # tmeasures's meaning: the transformation's parameters
        return self.param


def _same_views(name: str, k: int) -> tuple[Any, Any]:
    """invfast's transform ``name`` and a tmeasures set of its views: every parameter of ``grid(k)``, which
    must hold the identity (invfast's views are the grid with the identity once)."""
    t = T.get(name)
    grid = t.grid(k)
    assert bool(t.is_identity(grid).any()), f"{name}.grid({k}) has no identity: invfast would add one more view"
    return t, tmp.PyTorchTransformationSet([_InvfastView(t, grid[j : j + 1]) for j in range(grid.shape[0])])


class _HookedLayers(tmp.ActivationsModule):
    """tmeasures's ``ActivationsModule`` for named (non-leaf) modules, as its ``AutoActivationsModule`` does for
    leaves: a forward hook keeps each output; ``forward_activations`` returns them in order."""

    def __init__(self, model: nn.Module, paths: dict[str, str]) -> None:
        super().__init__()
        self.model = model
        self.names = list(paths)
        self.values: dict[int, torch.Tensor] = {}
        modules = dict(model.named_modules())
        for i, path in enumerate(paths.values()):
            modules[path].register_forward_hook(self._keep(i))

    def _keep(self, i: int) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
            self.values[i] = output.detach()

        return hook

    def activation_names(self) -> list[str]:
        return self.names

    def forward_activations(self, x: torch.Tensor) -> list[torch.Tensor]:
        self.values = {}
        self.model(x)
        return [self.values[i] for i in range(len(self.names))]


# ---------------------------------------------------------------------------------------------- comparison
def _agreement(ours: Any, theirs: Any, layers: list[str], name: str) -> dict[str, dict[str, float]]:
    """Per layer: invfast's ``normalized_variance`` against tmeasures's per-unit values averaged over its live
    units (denominator > 0); asserts the same dead units and the means within ``RTOL``. Also returns tmeasures's
    own ``per_layer_average`` (dead units scored 1 and averaged in), the number a tmeasures user reads."""
    theirs = theirs.numpy()
    assert len(theirs.layers) == len(layers), (theirs.layer_names, layers)
    by_layer = ours.layers if ours.layers else {layers[0]: ours}
    averages = theirs.per_layer_average()
    out = {}
    for i, ly in enumerate(layers):
        tr = by_layer[ly][name]
        mine = tr.unit_normalized_variance.double().numpy()
        nv = np.asarray(theirs.layers[i], dtype=np.float64).reshape(-1)
        live = np.asarray(theirs.y_result.layers[i]).reshape(-1) > 0
        assert mine.shape == nv.shape, (ly, mine.shape, nv.shape)
        assert np.array_equal(np.isnan(mine), ~live), f"{ly}: the dead units differ"
        theirs_mean = float(nv[live].mean())
        rel = abs(tr.normalized_variance - theirs_mean) / abs(theirs_mean)
        assert rel < RTOL, f"{ly}: invfast {tr.normalized_variance!r} vs tmeasures {theirs_mean!r} ({rel:.2e} rel)"
        out[ly] = {
            "invfast_nv": tr.normalized_variance,
            "tmeasures_nv_live_units": theirs_mean,
            "rel_diff": rel,
            "max_unit_abs_diff": float(np.abs(mine[live] - nv[live]).max()),
            "units": int(nv.size),
            "dead_units": int((~live).sum()),
            "tmeasures_per_layer_average": float(averages[i]),
        }
    return out


def _compare(
    benchmark: Any,
    record_ratio: Callable[..., float],
    label: str,
    model: nn.Module,
    images: torch.Tensor,
    layers: list[str],
    activations: Callable[[nn.Module], Any],
    load: str,
) -> None:
    """Warm-up run of each package (their numbers compared), then tmeasures (pedantic's untimed ``setup``, timed
    here) and invfast (pedantic's target) alternately, ``ROUNDS`` each; records tmeasures best / invfast best."""
    t, tset = _same_views("rotation", K)
    theirs_model = activations(copy.deepcopy(model))  # tmeasures's hooks stay on its own copy
    opts = tmp.PyTorchMeasureOptions(batch_size=BATCH, num_workers=0, verbose=False)
    data = _Images(images)

    def theirs() -> Any:
        return tmp.NormalizedVarianceInvariance().eval(data, tset, theirs_model, opts)

    def ours() -> Any:
        return measure_invariance(
            model,
            images,
            [t],
            layers=layers,
            units="elements",
            grid_size=K,
            batch_size=32,
            forward_batch=BATCH,
            normalize=False,
            device="cpu",
            workers=0,
            progress=False,
        )

    agree = _agreement(ours(), theirs(), layers, t.name)  # the warm-ups
    theirs_best = float("inf")

    def timed_theirs() -> None:
        nonlocal theirs_best
        theirs_best = min(theirs_best, _seconds(theirs))

    benchmark.pedantic(ours, setup=timed_theirs, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    ours_best = benchmark.stats.stats.min
    benchmark.extra_info.update(
        {
            "job": label,
            "load": load,
            "images": images.shape[0],
            "pixels": images.shape[-1],
            "views": K,
            "layers": layers,
            "tmeasures_s": theirs_best,
            "invfast_s": ours_best,
            "threads": torch.get_num_threads(),
            "loadavg_1min_at_end": os.getloadavg()[0],
            "tmeasures_version": _version("tmeasures"),
            "agreement": agree,
        }
    )
    ratio = record_ratio(
        f"tmeasures / invfast: {label} N={images.shape[0]} k={K} ({load})", theirs_best, GOAL if not SMALL else ""
    )
    worst = max(a["rel_diff"] for a in agree.values())
    print(
        f"\n[bench_tmeasures] {label} ({load}): tmeasures {theirs_best:.3f} s, invfast {ours_best:.3f} s: "
        f"{ratio:.2f}x; per-layer NV agree to {worst:.1e} rel; load {os.getloadavg()[0]:.2f}"
    )
    for ly, a in agree.items():
        print(
            f"    {ly:<28} NV {a['invfast_nv']:.6f} (tmeasures {a['tmeasures_nv_live_units']:.6f} on live units, "
            f"its per_layer_average {a['tmeasures_per_layer_average']:.6f}); dead {a['dead_units']}/{a['units']}"
        )


def _seconds(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------- the jobs
def _conv_net() -> nn.Module:
    torch.manual_seed(0)
    return ConvNet4().eval()


def test_conv4_four_blocks(benchmark, record_ratio, load):
    """The 4-block conv net at 32 px, its four blocks (the ReLU outputs) as layers; goal >= 3x tmeasures."""
    model = _conv_net()
    relus = [f"blocks.{i}.1" for i in range(4)]  # the blocks' outputs
    _compare(
        benchmark,
        record_ratio,
        "conv4 32px, 4 blocks",
        model,
        _images(CONV_N, CONV_PX),
        relus,
        lambda m: tmp.AutoActivationsModule(m, filter=lambda module: isinstance(module, nn.ReLU)),
        load,
    )


def test_resnet18_four_stages(benchmark, record_ratio, load):
    """invfast's ResNet-18 (ImageNet stem) at 64 px, its stages layer1 .. layer4; goal >= 3x tmeasures."""
    torch.manual_seed(0)
    model = models.create("resnet18").eval()
    stages = {k: v for k, v in resolve_layers(model, "all").items() if v is not None}
    assert list(stages) == ["layer1", "layer2", "layer3", "layer4"], stages
    _compare(
        benchmark,
        record_ratio,
        "ResNet-18 64px, 4 stages",
        model,
        _images(RESNET_N, RESNET_PX),
        list(stages),
        lambda m: _HookedLayers(m, stages),
        load,
    )


def test_conv4_every_leaf(benchmark, record_ratio, load):
    """tmeasures's default use: every leaf module of the conv net (``AutoActivationsModule`` unfiltered), against
    invfast given the same leaf paths; goal >= 3x tmeasures."""
    model = _conv_net()
    leaves = [path for path, m in model.named_modules() if path and not list(m.children())]
    assert len(leaves) == 9, list(leaves)  # 4 convs, 4 ReLUs, the pooling: the order AutoActivationsModule keeps
    _compare(
        benchmark,
        record_ratio,
        f"conv4 32px, every leaf ({len(leaves)} layers)",
        model,
        _images(CONV_N, CONV_PX),
        leaves,
        tmp.AutoActivationsModule,
        load,
    )
