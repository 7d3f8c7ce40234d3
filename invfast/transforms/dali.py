"""DALI pipelines for the pretraining policies and the deterministic test transforms (optional extra:
``pip install invfast[dali]``; this module is the only place that imports ``nvidia.dali``).

``device_id=None`` runs DALI's CPU operators (any machine); with a GPU, pass ``device_id=0``: folders are
then decoded with ``mixed`` decoding and the augmentations run on the GPU.

What maps to which DALI operator:

============================ ==============================================================================
policy step                  DALI
============================ ==============================================================================
RandomResizedCrop            ``fn.random_resized_crop`` (random_area = crop_scale, 10 attempts)
Resize + CenterCrop          ``fn.resize(resize_shorter=...)`` + ``fn.crop`` (DALI rounds a .5 centre offset up,
                             torchvision to even: a one-pixel shift for odd margins)
ColorJitter p                ``fn.brightness_contrast`` (contrast pivots on the image's mean grey level,
                             as torchvision) then ``fn.hsv`` (saturation, hue); DALI's order is fixed
                             (brightness, contrast, saturation, hue) and its saturation scales HSV
                             saturation, where torchvision blends with the luma image
RandomGrayscale p            ``fn.color_space_conversion`` RGB -> GRAY, blended per sample
GaussianBlur p               ``fn.gaussian_blur`` with a per-sample sigma
Solarize p                   DALI arithmetic on the uint8 image
HFlip + Normalize            ``fn.crop_mirror_normalize`` (mirror per sample), CHW float32
============================ ==============================================================================

Test transforms in DALI: crop, hflip, vflip, scale, shear, rotation, translation (all ``fn.warp_affine`` with
the same matrices as the torch path, or ``fn.flip``), brightness, grayscale, blur and invert. The others
(deform, contrast, saturation, hue, sharpness, equalize, posterize) have no DALI operator with the
torchvision semantics and are routed to the torch implementation by :func:`apply_test_transform`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from invfast.transforms import functional as Fn
from invfast.transforms._checks import as_images
from invfast.transforms.builtin import RECORDS, affine_params
from invfast.transforms.policy_config import PolicyConfig, policy_config
from invfast.transforms.registry import get

try:
    from nvidia.dali import fn, pipeline_def, types
except ImportError as exc:  # pragma: no cover - exercised only without DALI
    raise ImportError(
        "invfast.transforms.dali needs NVIDIA DALI: pip install nvidia-dali-cuda130 "
        "(or pip install invfast[dali]); the torch backend works without it"
    ) from exc

#: the test transforms DALI has an operator for (each record's ``dali``)
DALI_TRANSFORMS: tuple[str, ...] = tuple(n for n, r in RECORDS.items() if r.dali is not None)


def _to_hwc_list(images: torch.Tensor) -> list[np.ndarray]:
    images = as_images(images)
    if images.dtype != torch.uint8:
        images = Fn.quantize(images.float())
    return [np.ascontiguousarray(a) for a in images.permute(0, 2, 3, 1).numpy()]


def _tensor(out: Any) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(out.as_array()))


# ----------------------------------------------------------------------------------------------
# policies


def _policy_view(images: Any, c: PolicyConfig, gpu: bool) -> Any:
    """One augmented view of the DALI node ``images`` (uint8 HWC) -> float CHW normalised."""
    S = c.size
    if c.crop:
        x = fn.random_resized_crop(
            images,
            size=(S, S),
            random_area=list(c.crop_scale),
            random_aspect_ratio=list(c.crop_ratio),
            num_attempts=10,
            interp_type=types.INTERP_LINEAR,
            antialias=False,
        )
    else:
        x = fn.resize(images, resize_shorter=max(S, int(round(S * c.resize_ratio))), interp_type=types.INTERP_LINEAR)
        x = fn.crop(x, crop=(S, S))
    if c.jitter:
        on = fn.random.coin_flip(probability=c.p_jitter)
        bs, cs, ss, hs = c.jitter_strength

        def factor(strength: float) -> Any:
            u = fn.random.uniform(range=[max(0.0, 1.0 - strength), 1.0 + strength])
            return on * u + (1 - on)

        b, con, sat = factor(bs), factor(cs), factor(ss)
        hue = on * fn.random.uniform(range=[-hs, hs]) * 360.0
        gray = fn.color_space_conversion(x, image_type=types.RGB, output_type=types.GRAY)
        centre = fn.reductions.mean(fn.cast(gray, dtype=types.FLOAT))
        x = fn.brightness_contrast(x, brightness=b, contrast=con, contrast_center=centre * b)
        x = fn.hsv(x, saturation=sat, hue=hue)
    if c.grayscale:
        g = fn.random.coin_flip(probability=c.p_grayscale)
        gray = fn.color_space_conversion(x, image_type=types.RGB, output_type=types.GRAY)
        gray3 = fn.cat(gray, gray, gray, axis=2)
        x = fn.cast(g * gray3 + (1 - g) * x, dtype=types.UINT8)
    if c.blur:
        on = fn.random.coin_flip(probability=c.p_blur)
        scale = S / 224.0
        sigma = fn.random.uniform(range=[c.blur_sigma[0] * scale, c.blur_sigma[1] * scale])
        blurred = fn.gaussian_blur(x, sigma=sigma)
        x = fn.cast(on * blurred + (1 - on) * x, dtype=types.UINT8)
    if c.solarize:
        on = fn.random.coin_flip(probability=c.p_solarize)
        t = int(round(c.solarize_threshold * 255))
        xi = fn.cast(x, dtype=types.INT16)
        sol = (xi >= t) * (255 - 2 * xi) + xi
        x = fn.cast(on * sol + (1 - on) * xi, dtype=types.UINT8)
    mirror = fn.random.coin_flip(probability=c.p_flip) if c.flip else 0
    mean = [m * 255 for m in c.mean] if c.normalize else [0.0, 0.0, 0.0]
    std = [s * 255 for s in c.std] if c.normalize else [255.0, 255.0, 255.0]
    return fn.crop_mirror_normalize(x, dtype=types.FLOAT, output_layout="CHW", mean=mean, std=std, mirror=mirror)


class _Feed:
    """External-source callback serving the batch set by the caller.

    DALI calls it once for each iteration it schedules. The policy pipelines are built with
    ``prefetch_queue_depth=1``, so an iteration is scheduled only by the ``run()`` that returns it: with
    DALI's default depth of 2 the first ``run()`` scheduled two iterations on the first batch and every
    later call returned the previous call's images.
    """

    def __init__(self) -> None:
        self.batch: list[np.ndarray] = []
        self.calls = 0  # iterations served (each pipe.run() must serve exactly one)

    def __call__(self) -> list[np.ndarray]:
        self.calls += 1
        return self.batch


class DaliPolicy:
    """A pretraining policy as a DALI pipeline (two views per image), fed from memory.

    ``DaliPolicy(config, seed=0)(images)`` -> ``(view1, view2)`` float32 [B, 3, size, size] torch tensors.
    Successive calls continue one random stream (like a data loader); two policies built with the same
    seed give the same sequence of views. Passing ``generator=`` draws a seed from it and starts a fresh
    pipeline, so the same generator state gives the same views (at the cost of a pipeline build).
    """

    def __init__(
        self,
        config: PolicyConfig,
        name: str = "custom",
        batch_size: int | None = None,
        num_threads: int = 2,
        device_id: int | None = None,
        seed: int = 0,
    ) -> None:
        self.config = config
        self.name = name
        self.batch_size = batch_size
        self.num_threads = num_threads
        self.device_id = device_id
        self.seed = int(seed)
        self._pipes: dict[int, tuple[Any, _Feed]] = {}

    def __repr__(self) -> str:
        return f"DaliPolicy({self.name!r}, size={self.config.size}, device_id={self.device_id})"

    def pipeline(self, source: Any, batch_size: int, seed: int = 0) -> Any:
        """A built DALI pipeline whose outputs are the two views of the batches ``source`` returns
        (a callable returning a list of uint8 HWC arrays)."""
        gpu = self.device_id is not None
        config = self.config

        # one iteration in flight: the views run() returns are those of the batch fed just before it
        @pipeline_def(
            batch_size=batch_size,
            num_threads=self.num_threads,
            device_id=self.device_id,
            seed=seed,
            prefetch_queue_depth=1,
        )
        def views() -> Any:
            images = fn.external_source(source=source, batch=True, layout="HWC")
            if gpu:
                images = images.gpu()
            return _policy_view(images, config, gpu), _policy_view(images, config, gpu)

        pipe = views()
        pipe.build()
        return pipe

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch = _to_hwc_list(images)
        n = len(batch)
        if generator is not None:
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
            feed = _Feed()
            pipe = self.pipeline(feed, n, seed=seed)
        else:
            if n not in self._pipes:
                feed = _Feed()
                self._pipes[n] = (self.pipeline(feed, n, seed=self.seed), feed)
            pipe, feed = self._pipes[n]
        feed.batch = batch
        before = feed.calls
        v1, v2 = pipe.run()
        if feed.calls != before + 1:  # the views would belong to another call's images
            raise RuntimeError(
                f"DALI ran {feed.calls - before} iterations for one call (expected 1); "
                "the policy pipeline must be built with prefetch_queue_depth=1"
            )
        if self.device_id is not None:
            v1, v2 = v1.as_cpu(), v2.as_cpu()
        return _tensor(v1), _tensor(v2)


class DaliLoader:
    """Iterator over a data set through a DALI policy pipeline, yielding torch tensors.

    Yields ``(view1, view2, labels)``: float32 [B, 3, size, size] views and int64 [B] labels (the class index
    of the sub-folder for :meth:`from_folder`, the given labels or zeros for :meth:`from_arrays`).
    One pass over the data per ``iter()``; the last incomplete batch is dropped.
    """

    def __init__(self, pipe: Any, steps: int) -> None:
        self._pipe = pipe
        self._steps = steps

    def __len__(self) -> int:
        return self._steps

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        for _ in range(self._steps):
            v1, v2, labels = self._pipe.run()
            if hasattr(v1, "as_cpu"):
                v1, v2 = v1.as_cpu(), v2.as_cpu()
            yield _tensor(v1), _tensor(v2), _tensor(labels).reshape(-1).to(torch.int64)

    @classmethod
    def from_arrays(
        cls,
        images: torch.Tensor,
        policy: Any,
        batch_size: int,
        labels: Any = None,
        seed: int = 0,
        num_threads: int = 2,
        device_id: int | None = None,
    ) -> DaliLoader:
        """Iterate over in-memory images [N, 3, H, W] (uint8 or float in [0, 1]) in order."""
        arrays = _to_hwc_list(images)
        lab = np.zeros(len(arrays), np.int64) if labels is None else np.asarray(labels, np.int64)
        if lab.shape != (len(arrays),):
            raise ValueError(f"labels must have one entry per image ({len(arrays)}), got shape {lab.shape}")
        if batch_size < 1 or batch_size > len(arrays):
            raise ValueError(f"batch_size must be in 1..{len(arrays)}, got {batch_size}")
        steps = len(arrays) // batch_size

        def source(info: Any) -> tuple[np.ndarray, np.ndarray]:
            i = info.idx_in_epoch % (steps * batch_size)
            return arrays[i], lab[i : i + 1]

        config = _config(policy)

        @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
        def pipe() -> Any:
            imgs, labels_ = fn.external_source(source=source, num_outputs=2, batch=False, layout=["HWC", ""])
            if device_id is not None:
                imgs = imgs.gpu()
            return (
                _policy_view(imgs, config, device_id is not None),
                _policy_view(imgs, config, device_id is not None),
                labels_,
            )

        p = pipe()
        p.build()
        return cls(p, steps)

    @classmethod
    def from_folder(
        cls,
        root: str | os.PathLike,
        policy: Any,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        num_threads: int = 2,
        device_id: int | None = None,
    ) -> DaliLoader:
        """Iterate over an image folder ``root/<class>/<image>`` (``fn.readers.file``), decoded on the CPU
        (``device_id=None``) or with ``mixed`` decoding on the GPU."""
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise ValueError(f"root {root!r} is not a directory of class sub-folders")
        n = sum(len(files) for _, _, files in os.walk(root))
        if n == 0:
            raise ValueError(f"root {root!r} holds no files")
        config = _config(policy)

        @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
        def pipe() -> Any:
            jpegs, labels_ = fn.readers.file(file_root=root, random_shuffle=shuffle, name="Reader")
            imgs = fn.decoders.image(jpegs, device="cpu" if device_id is None else "mixed", output_type=types.RGB)
            return (
                _policy_view(imgs, config, device_id is not None),
                _policy_view(imgs, config, device_id is not None),
                labels_,
            )

        p = pipe()
        p.build()
        steps = p.epoch_size("Reader") // batch_size
        return cls(p, max(1, steps))


def _config(policy: Any) -> PolicyConfig:
    if isinstance(policy, PolicyConfig):
        return policy
    if hasattr(policy, "config"):
        return policy.config
    return policy_config(policy)[0]


# ----------------------------------------------------------------------------------------------
# deterministic test transforms


def _corner_matrix(name: str, p: torch.Tensor, H: int, W: int) -> np.ndarray:
    """DALI warp_affine matrices (output -> input, corner coordinates) equal to the torch path's."""
    A, b = affine_params(get(name), p, H, W)
    A = Fn._snap(A.to(torch.float64))
    t = b.to(torch.float64) - (A @ Fn.centre(H, W).view(2, 1)).squeeze(-1)  # pixel-centre offset
    t = t + 0.5 - (A @ torch.full((2, 1), 0.5, dtype=torch.float64)).squeeze(-1)
    return torch.cat([A, t.unsqueeze(-1)], dim=-1).to(torch.float32).numpy()


def apply_test_transform(
    name: str, images: torch.Tensor, params: Any, num_threads: int = 2, device_id: int | None = None
) -> torch.Tensor:
    """``get(name).apply(images, params)`` through DALI where DALI has the operator (``DALI_TRANSFORMS``),
    through torch otherwise. uint8 images [B, 3, H, W] -> [B, P, 3, H, W] uint8."""
    t = get(name)
    p = t._params(params)
    images = as_images(images)
    if name not in DALI_TRANSFORMS:
        return t.apply(images, p)
    if images.dtype != torch.uint8:
        raise ValueError("the DALI test transforms take uint8 images; use get(name).apply for float images")
    B, _, H, W = images.shape
    P = p.shape[0]
    arrays = _to_hwc_list(images)
    samples = [arrays[b] for b in range(B) for _ in range(P)]
    per = [p[j] for _ in range(B) for j in range(P)]
    op = RECORDS[name].dali
    assert op is not None
    if op.matrix:
        mats = _corner_matrix(name, p, H, W)
        args = [mats[j] for _ in range(B) for j in range(P)]
    else:
        args = [np.asarray(float(v), np.float32) for v in per]

    @pipeline_def(batch_size=len(samples), num_threads=num_threads, device_id=device_id, seed=0)
    def pipe() -> Any:
        x = fn.external_source(source=lambda: samples, batch=True, layout="HWC")
        a = fn.external_source(source=lambda: args, batch=True)
        if device_id is not None:
            x = x.gpu()
        return op.build(fn, types, x, a, H, W)

    pl = pipe()
    pl.build()
    (out,) = pl.run()
    if device_id is not None:
        out = out.as_cpu()
    return _tensor(out).reshape(B, P, H, W, 3).permute(0, 1, 4, 2, 3).contiguous()


__all__: Sequence[str] = ("DALI_TRANSFORMS", "DaliLoader", "DaliPolicy", "apply_test_transform")
