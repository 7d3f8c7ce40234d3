"""The parameter grids, identity tests and parameter checks of the built-in test transforms (what each
record of :data:`invfast.transforms.builtin.RECORDS` is made of besides its implementation). Grids are small
float32 host tensors (on the CPU whatever torch's default device); ``apply`` moves them once."""

from __future__ import annotations

import torch

from invfast.transforms._checks import require

CPU = torch.device("cpu")


def lin(lo: float, hi: float, k: int) -> torch.Tensor:
    return torch.linspace(lo, hi, k, dtype=torch.float64, device=CPU).to(torch.float32)


def side(k: int, dims: int) -> int:
    return max(1, int(round(k ** (1.0 / dims))))


def binary_grid(k: int) -> torch.Tensor:
    return torch.tensor([0.0, 1.0], device=CPU)


def crop_grid(k: int) -> torch.Tensor:
    n = side(k, 4)
    anchors = lin(0.0, 0.25, n) if n > 1 else torch.zeros(1, device=CPU)
    sizes = lin(0.75, 0.25, n) if n > 1 else torch.full((1,), 0.75, device=CPU)
    g = torch.cartesian_prod(anchors, anchors, sizes, sizes)
    return g.reshape(-1, 4)


def shear_grid(k: int) -> torch.Tensor:
    n = side(k, 2)
    a = torch.tensor([-160.0 + 320.0 * i / n for i in range(n)], dtype=torch.float32, device=CPU)
    return torch.cartesian_prod(a, a).reshape(-1, 2)


def translation_grid(k: int) -> torch.Tensor:
    n = side(k, 2)
    a = lin(-16.0, 16.0, n) if n > 1 else torch.zeros(1, device=CPU)
    return torch.cartesian_prod(a, a).reshape(-1, 2)


def rotation_grid(k: int) -> torch.Tensor:
    return (torch.arange(k, dtype=torch.float64, device=CPU) * (360.0 / k)).to(torch.float32)


def range_check(name: str, lo: float | None, hi: float | None, what: str, strict_lo: bool = False):
    def check(p: torch.Tensor) -> None:
        if lo is not None:
            ok = (p > lo) if strict_lo else (p >= lo)
            require(
                ok, f"{name}: {what} must be {'>' if strict_lo else '>='} {lo}", lambda: f", got {float(p[~ok][0]):g}"
            )
        if hi is not None:
            require(p <= hi, f"{name}: {what} must be <= {hi}", lambda: f", got {float(p[p > hi][0]):g}")

    return check


def binary_check(name: str):
    def check(p: torch.Tensor) -> None:
        require(
            (p == 0) | (p == 1),
            f"{name}: params must be 0 (identity) or 1 (transformed)",
            lambda: f", got {p.unique().tolist()}",
        )

    return check


def posterize_check(p: torch.Tensor) -> None:
    ok = (p == p.round()) & (p >= 1) & (p <= 8)
    require(ok, "posterize: bits must be an integer in 1..8 (8 = identity)", lambda: f", got {float(p[~ok][0]):g}")


def crop_check(p: torch.Tensor) -> None:
    top, left, h, w = p.unbind(1)
    require((h > 0) & (w > 0), "crop: height and width fractions must be > 0")
    require(
        (top >= 0) & (left >= 0) & (top + h <= 1 + 1e-6) & (left + w <= 1 + 1e-6),
        "crop: the box (top, left, height, width) must lie inside the image: "
        "top, left >= 0 and top + height, left + width <= 1",
    )


def shear_check(p: torch.Tensor) -> None:
    c = torch.cos(torch.deg2rad(p.double())).abs()
    require(c >= 1e-6, "shear: angles of +-90 degrees (mod 180) are degenerate (infinite shear)")


def near(p: torch.Tensor, v: float) -> torch.Tensor:
    """bool: ``p`` within 1e-6 (relative above 1) of ``v``."""
    return (p - v).abs() <= 1e-6 * max(1.0, abs(v))
