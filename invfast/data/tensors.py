"""Sources over images already in memory: tensors / arrays, and map-style datasets."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from invfast.data.protocol import Source, float_scale, to_uint8


class TensorSource(Source):
    """Images held in memory: ``images [N, C, H, W]`` uint8 (0..255) or float (0..1).

    ``groups``: optional [N] integer group ids (object/scene) for real-world mode."""

    def __init__(
        self, images: torch.Tensor | np.ndarray, groups: Any = None, name: str = "tensor", spec: str | None = None
    ) -> None:
        if isinstance(images, np.ndarray):
            images = torch.from_numpy(np.ascontiguousarray(images))
        if not isinstance(images, torch.Tensor):
            raise TypeError(f"data must be a tensor [N, C, H, W], got {type(images).__name__}")
        if images.dim() != 4:
            raise ValueError(f"data must be images [N, C, H, W], got shape {tuple(images.shape)}")
        if images.shape[0] == 0:
            raise ValueError("data holds no images (N = 0)")
        if images.dtype != torch.uint8 and not images.is_floating_point():
            raise TypeError(f"images must be uint8 (0..255) or float (0..1), got {images.dtype}")
        if images.is_floating_point() and float_scale(images, "the images") != 1.0:
            raise ValueError(
                f"the images are float with values up to {float(images.max()):.4g}: float images must be "
                "in 0..1; divide them by 255 or pass uint8"
            )
        self.images = images
        self.groups = _as_groups(groups, images.shape[0])
        self.name = name
        self.spec = spec if spec is not None else name

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def load(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long, device=self.images.device)
        return self.images[idx], torch.ones(idx.numel(), dtype=torch.bool, device="cpu")  # host: which loaded

    def get(self, indices: Sequence[int] | torch.Tensor) -> torch.Tensor:
        return to_uint8(self.images[torch.as_tensor(indices, dtype=torch.long, device=self.images.device)])

    def identity(self) -> str:
        """SHA-256 over the images' shape, dtype and bytes."""
        import hashlib

        h = hashlib.sha256(f"{tuple(self.images.shape)}:{self.images.dtype}".encode())
        for s in range(0, self.images.shape[0], 256):  # in blocks: bounded host memory for GPU tensors
            h.update(self.images[s : s + 256].detach().contiguous().cpu().numpy().tobytes())
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        x = self.images
        return {
            "kind": "tensor",
            "name": self.name,
            "n": len(self),
            "shape": list(x.shape[1:]),
            "dtype": str(x.dtype),
            "checksum": float(x[:: max(1, x.shape[0] // 64)].double().sum()),
        }


class ArraySource(TensorSource):
    """RGB images in memory for pretraining: uint8 (0..255) or float (0..1), ``[N, 3, H, W]`` or
    ``[N, H, W, 3]``; kept as uint8 [N, 3, H, W]."""

    def __init__(self, images: Any, spec: str = "array") -> None:
        x = torch.from_numpy(np.ascontiguousarray(images)) if isinstance(images, np.ndarray) else images
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"images must be a numpy array or torch.Tensor, got {type(images).__name__}")
        if x.dim() != 4:
            raise ValueError(f"images must be [N, 3, H, W] or [N, H, W, 3], got shape {tuple(x.shape)}")
        if x.shape[1] != 3 and x.shape[-1] == 3:
            x = x.permute(0, 3, 1, 2)
        if x.shape[1] != 3:
            raise ValueError(f"images must have 3 colour channels, got shape {tuple(x.shape)}")
        if x.dtype != torch.uint8 and not x.is_floating_point():
            raise TypeError(f"images must be uint8 (0..255) or float (0..1), got {x.dtype}")
        if x.shape[0] == 0:
            raise ValueError("images is empty")
        if x.is_floating_point():  # 0..1 or already 0..255: read by their range, not clamped
            scale = float_scale(x, f"the images of {spec}")
            if scale == 255.0:
                warnings.warn(
                    f"{spec}: float images with values up to {float(x.max()):.4g} are read as 0..255", stacklevel=2
                )
                x = x.round().clamp(0, 255).to(torch.uint8)
        super().__init__(to_uint8(x).contiguous(), name=spec, spec=spec)


class DatasetSource(Source):
    """Any map-style dataset whose items are an image ``[C, H, W]`` or a tuple starting with one.

    Objects with a ``generate(indices)`` method (``invfast.synthetic.Transforms2D``) are read a
    batch at a time through it.
    """

    def __init__(self, dataset: Any, n: int | None = None, name: str | None = None) -> None:
        if not hasattr(dataset, "__len__") or not (hasattr(dataset, "__getitem__") or hasattr(dataset, "generate")):
            raise TypeError(
                f"data must be a tensor, a folder path or a map-style dataset, got {type(dataset).__name__}"
            )
        total = len(dataset)
        if n is not None and n > total:
            raise ValueError(f"asked for {n} images but the dataset holds {total}")
        self.dataset = dataset
        self.n = total if n is None else int(n)
        if self.n == 0:
            raise ValueError("data holds no images (N = 0)")
        self.groups = None
        self.name = name or type(dataset).__name__
        self.spec = self.name

    def __len__(self) -> int:
        return self.n

    def load(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = [int(i) for i in torch.as_tensor(indices, dtype=torch.long).reshape(-1)]
        if hasattr(self.dataset, "generate"):
            images = self.dataset.generate(idx)[0]
        else:
            items = [self.dataset[i] for i in idx]
            images = torch.stack([it[0] if isinstance(it, (tuple, list)) else it for it in items])
        if images.dim() != 4:
            raise ValueError(f"the dataset's images must be [C, H, W], got a batch of shape {tuple(images.shape)}")
        return images, torch.ones(len(idx), dtype=torch.bool)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": "dataset", "name": self.name, "n": self.n}
        for attr in ("seed", "size", "split"):
            if hasattr(self.dataset, attr):
                v = getattr(self.dataset, attr)
                d[attr] = v if isinstance(v, (int, float, str)) else repr(v)
        return d


def _as_groups(groups: Any, n: int) -> torch.Tensor | None:
    if groups is None:
        return None
    g = torch.as_tensor(np.asarray(groups) if not isinstance(groups, torch.Tensor) else groups)
    if g.dim() != 1 or g.shape[0] != n:
        raise ValueError(f"groups must be a 1-D sequence of {n} group ids (one per image), got shape {tuple(g.shape)}")
    if g.is_floating_point():
        raise TypeError("groups must hold integer group ids")
    _, inv = torch.unique(g, return_inverse=True)
    return inv.long()


__all__ = ["ArraySource", "DatasetSource", "TensorSource"]
