"""Small exact transforms and models for the measurement tests (independent of invfast.transforms)."""

from __future__ import annotations

import os
import socket

import torch


class Rot90:
    """Exact rotations by k·90°, k in {0, 1, 2, 3}; k = 0 is the identity."""

    name, family = "rot90", "spatial"

    def grid(self, k: int = 256) -> torch.Tensor:
        return torch.arange(4, dtype=torch.float64)

    def is_identity(self, params: torch.Tensor) -> torch.Tensor:
        return params == 0

    def apply(self, images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.rot90(images, int(k), dims=(-2, -1)) for k in params.tolist()], dim=1)


class HFlip:
    """Horizontal flip: parameter 0 (identity) or 1."""

    name, family = "hflip", "spatial"

    def grid(self, k: int = 256) -> torch.Tensor:
        return torch.tensor([0.0, 1.0], dtype=torch.float64)

    def is_identity(self, params: torch.Tensor) -> torch.Tensor:
        return params == 0

    def apply(self, images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        return torch.stack([images.flip(-1) if p else images for p in params.tolist()], dim=1)


class Brightness:
    """Multiply uint8/float pixels by a factor in [0.25, 2] (k grid points; factor 1 is not on the grid)."""

    name, family = "brightness", "appearance"

    def grid(self, k: int = 256) -> torch.Tensor:
        return torch.linspace(0.25, 2.0, k, dtype=torch.float64)

    def is_identity(self, params: torch.Tensor) -> torch.Tensor:
        return params == 1

    def apply(self, images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        x = images.double().unsqueeze(1) * params.view(1, -1, 1, 1, 1)
        if images.dtype == torch.uint8:
            return x.round().clamp(0, 255).to(torch.uint8)
        return x.clamp(0, 1).to(images.dtype)


def small_net(seed: int = 0, dim: int = 12) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, dim, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(2),
    )
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    class Pool(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.body(x)  # [B, D, HW]
            return torch.cat([h.mean(-1), h.amax(-1)], dim=1)  # position-sensitive enough to see flips

    return Pool()


class Rot90Averaged(torch.nn.Module):
    """Features averaged over the four 90° rotations of the input: exactly rot90-invariant."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fs = torch.stack([self.inner(torch.rot90(x, k, dims=(-2, -1)).contiguous()) for k in range(4)])
        return fs.sort(dim=0).values.sum(0) / 4  # sorted sum: bitwise identical for every rotation


def random_images(n: int, size: int = 16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n, 3, 4, 4, generator=g)
    x = torch.nn.functional.interpolate(base, size=(size, size), mode="bilinear", align_corners=False)
    x = x + 0.15 * torch.rand(n, 3, size, size, generator=g)
    return (x.clamp(0, 1) * 255).round().to(torch.uint8)


def image_folder(path, n: int = 10, size: int = 20, seed: int = 4):
    """A folder of ``n`` random ``size``-px PNGs (``00.png``, ``01.png``, ...) at ``path`` (made here)."""
    from PIL import Image

    x = random_images(n, size=size, seed=seed).permute(0, 2, 3, 1).numpy()
    path.mkdir()
    for i in range(n):
        Image.fromarray(x[i]).save(path / f"{i:02d}.png")
    return path


#: a small `invfast measure` on the CPU (add --data and --out): two transforms at grid 3 on 20-px images
MEASURE_CLI = [
    "measure",
    "--model",
    "measure_helpers:small_net",
    "--transforms",
    "rotation,hflip",
    "--grid-size",
    "3",
    "--resize",
    "20",
    "--images",
    "0",
    "--no-progress",
    "--no-plots",
    "--device",
    "cpu",
    "--batch-size",
    "4",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dist_worker(rank: int, world: int, port: int, images_path: str, out_dir: str) -> None:
    """One rank of the sharded test: measure, rank 0 writes the result JSON."""
    import torch.distributed as dist

    from invfast.measure import measure_invariance

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        x = torch.load(images_path)
        r = measure_invariance(
            small_net(dim=6),
            x,
            [Rot90(), Brightness()],
            grid_size=5,
            batch_size=4,
            forward_batch=64,
            pair_scores_dir=os.path.join(out_dir, "pairs"),
            state_path=os.path.join(out_dir, "state.pt"),
            save_every=0,
            equivariance=True,
        )
        if rank == 0:
            r.to_json(os.path.join(out_dir, "result.json"))
    finally:
        dist.destroy_process_group()
