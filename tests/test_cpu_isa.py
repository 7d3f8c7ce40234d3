"""The compiled core's one CPU instruction-set policy (csrc/common/cpu_isa.h): every kernel built in more than one
variant runs the one ``invfast._C.cpu_isa()`` names — the CPU's highest level, lowered by ``INVFAST_CPU_ISA`` — and
each lower level gives what the level above gives: the same bits where the kernel promises them (the 18
transforms' uint8 and float kernels, the per-unit moments), float agreement where the wider build contracts to
FMA or reduces in another order (the fused augmentation, weight generation, the all-pairs log-sum-exp). Each level
runs in a fresh process: the core reads the variable once. An unknown value: test_backend.py, with the other
start-up settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from invfast import backend

ROOT = Path(__file__).resolve().parents[1]
LEVELS = backend.CPU_ISA_LEVELS

pytestmark = pytest.mark.skipif("pair_scores" not in backend.compiled_ops(), reason="the compiled core is not built")

# Each kernel family with a second build, on fixed inputs; torch.save of {name: output} to argv[1].
_OUTPUTS = r"""
import sys, torch
import invfast.transforms as T
from invfast import _loader
from invfast.ops import augment as A, invariance as I
g = torch.Generator().manual_seed(int(sys.argv[2]))
out = {"isa": _loader.load().cpu_isa()}
x8 = torch.randint(0, 256, (2, 3, 37, 29), dtype=torch.uint8, generator=g)
for name in T.TEST_TRANSFORMS:
    t = T.get(name)
    p = t.grid(5)
    out["exact/" + name + "/u8"] = t.apply(x8, p)
    out["exact/" + name + "/float"] = t.apply(x8.float() / 255, p)
B = 5
img = torch.randint(0, 256, (B, 3, 40, 44), dtype=torch.uint8, generator=g)
mat = torch.tensor([[1.3, -0.4, 2.5], [0.3, 1.1, 1.5]]).expand(B, 2, 3) + 0.2 * torch.rand(B, 2, 3, generator=g)
fac = torch.cat([0.6 + 0.8 * torch.rand(B, 3, generator=g), torch.rand(B, 1, generator=g) - 0.5], 1)
order = torch.stack([torch.randperm(4, generator=g) for _ in range(B)])
on = torch.rand(B, generator=g) < 0.6
for cl in (False, True):
    out["close/augment/" + str(cl)] = A.augment_views(
        img, mat, (24, 28), jitter=on, factors=fac, order=order, grayscale=~on, blur=on | ~on,
        sigma=0.3 + 1.5 * torch.rand(B, generator=g), solarize=on.flip(0), threshold=0.6,
        mean=(0.4, 0.45, 0.5), std=(0.2, 0.25, 0.3), channels_last=cl)
x = torch.randn(300, 40, generator=g)
out["close/pairwise_logsumexp"] = I.pairwise_logsumexp(x, 2.0, True, 64)
out["close/sqdist_logsumexp"] = I.sqdist_logsumexp(x[:50], x, 0, 1.5)
d, idx = I.knn_sqdist(x, 7, False, 64)
out["close/knn_sqdist"], out["exact/knn_index"] = d, idx
u = torch.randn(16, 4, 3000, generator=g)
run = [torch.zeros(r, 3000, dtype=torch.float64) for r in (16, 16, 4, 4)]
I.merge_unit_moments_(u, run[0], run[1], 0, run[2], run[3], 0)
I.merge_unit_moments_(2 * u + 1, run[0], run[1], 4, run[2], run[3], 16)
out["exact/merge_unit_moments"] = torch.stack([run[0], run[1]])
hid, w, b = torch.randn(8, 3, 64, generator=g), torch.randn(500, 64, generator=g), torch.randn(500, generator=g)
out["close/hyper_generate"] = torch.ops.invfast.hyper_generate(hid, w, b, [0, 100, 300, 500])
grads = torch.ops.invfast.hyper_generate_backward(torch.randn(8, 500, generator=g), hid, w, [0, 100, 300, 500])
for i, t in enumerate(grads):
    out["close/hyper_generate_backward/" + str(i)] = t
torch.save(out, sys.argv[1])
"""


def _outputs(tmp_path: Path, isa: str, seed: int) -> dict:
    path = tmp_path / f"{isa or 'default'}.pt"
    env = {**os.environ, "INVFAST_CPU_ISA": isa, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2"}
    done = subprocess.run(
        [sys.executable, "-c", _OUTPUTS, str(path), str(seed)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(path)


def _isa(isa: str) -> str:
    env = {**os.environ, "INVFAST_CPU_ISA": isa, "PYTHONPATH": str(ROOT)}
    code = "import torch; from invfast import _loader; m = _loader.load(); print(m.cpu_isa(), m.cpu_isa_supported())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_the_variable_lowers_the_level_and_never_raises_it():
    default, supported = _isa("")
    assert default == supported and supported in LEVELS
    for cap in LEVELS:
        used, _ = _isa(cap)
        assert used == LEVELS[min(LEVELS.index(cap), LEVELS.index(supported))], (cap, used, supported)
    assert backend.backend_info()["cpu_isa_supported"] == supported


# Inputs on which a blur built to contract into fused multiply-adds gave one pixel a level apart at the baseline
# build (a sum at a rounding edge): the CI failure that made the blur kernel round every product alike. It replays
# those inputs while ``x8`` stays the first draw of _OUTPUTS.
FMA_EDGE_SEED = 2063784826


def test_every_lower_level_computes_what_the_highest_computes(tmp_path, rng):
    _compare_levels(tmp_path, int(rng.integers(2**31)))


def test_every_level_computes_the_same_at_a_known_rounding_edge(tmp_path):
    _compare_levels(tmp_path, FMA_EDGE_SEED)


def _compare_levels(tmp_path: Path, seed: int) -> None:
    top = _outputs(tmp_path, "", seed)
    lower = [level for level in LEVELS if LEVELS.index(level) < LEVELS.index(top["isa"])]
    if not lower:
        pytest.skip("this CPU has only the baseline build")
    for level in lower:
        got = _outputs(tmp_path, level, seed)
        assert got["isa"] == level and got.keys() == top.keys()
        for key, want in top.items():
            if key.startswith("exact/"):
                assert torch.equal(got[key], want), (level, key)
            elif key.startswith("close/"):
                assert got[key].dtype == want.dtype and got[key].shape == want.shape, (level, key)
                torch.testing.assert_close(got[key], want, rtol=2e-5, atol=2e-5, msg=f"{level} {key}")


def test_the_comparison_tells_a_different_input_apart(tmp_path, rng):
    """The check above has power: the same level on another seed fails both of its comparisons."""
    seed = int(rng.integers(2**31 - 1))
    a, b = _outputs(tmp_path, "", seed), _outputs(tmp_path, "", seed + 1)
    assert not torch.equal(a["exact/merge_unit_moments"], b["exact/merge_unit_moments"])
    assert not torch.allclose(a["close/hyper_generate"], b["close/hyper_generate"], rtol=2e-5, atol=2e-5)
