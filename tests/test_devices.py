"""Every device-sensitive path on every device: "cpu", "guard" (CPU data under the device guard,
tests/device_guard.py: catches tensors created off the data's device without a GPU) and "cuda"
(`pytest -m cuda`, where a GPU exists). Results on the guard must equal the plain CPU ones exactly;
CUDA results are compared with the CPU ones (transforms within 1 grey level or 1e-5 on floats)."""
from __future__ import annotations

import pytest
import torch

from invfast import transforms as T

NAMES = T.SYNTHETIC


def _images(dtype: torch.dtype, seed: int, b: int = 3, h: int = 20, w: int = 24) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u8 = torch.randint(0, 256, (b, 3, h, w), generator=g, dtype=torch.uint8)
    return u8 if dtype == torch.uint8 else u8.to(dtype) / 255.0


def _params(name: str) -> torch.Tensor:
    grid = T.get(name).grid(8)
    return grid[: min(len(grid), 5)]


def _assert_close_images(got: torch.Tensor, want: torch.Tensor, exact: bool) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    got, want = got.cpu(), want.cpu()
    if exact:
        assert torch.equal(got, want)
    elif want.dtype == torch.uint8:
        assert (got.to(torch.int16) - want.to(torch.int16)).abs().max() <= 1
    else:
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=["u8", "f32"])
@pytest.mark.parametrize("name", NAMES)
def test_transform_on_device(device, name, dtype):
    x = _images(dtype, seed=len(name))
    p = _params(name)
    want = T.get(name).apply(x, p)
    xd = x.to(device.device)
    for pd in {p.device: p, device.device: p.to(device.device)}.values():  # params on either device
        with device.run():
            out = T.get(name).apply(xd, pd)
        device.check(out)
        _assert_close_images(out, want, exact=device.name != "cuda")
