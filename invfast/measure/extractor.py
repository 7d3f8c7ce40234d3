"""The model side of a measurement: loading a model by name, fixing an amortised model's descriptor,
and turning image batches into pooled features on the measurement device."""

from __future__ import annotations

import contextlib
import copy
import itertools
import os
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
from invfast.intra_op import at_threads
from invfast.measure.cpu_pooling import nhwc_max_pools
from invfast.measure.layers import OUTPUT, LayerTap, resolve_layers
from invfast.measure.units import check_units
from invfast.models.outputs import pooled_output
from invfast.models.registry import load_checkpoint

__all__ = [
    "CALL_ACTIVATION_BYTES",
    "WithDescriptor",
    "load_model",
    "FeatureExtractor",
    "model_checksum",
    "setup_model",
]

#: on the CPU, the most bytes the largest activation of one model call may take: a call of more images runs
#: as sub-batches of fewer (:meth:`FeatureExtractor.images_per_call`). Measured at one thread on this project's
#: 2-core machine (2 MiB L2 per core, 32 MiB L3), ms per image by images per call, whole call -> within the
#: budget: ResNet-50 224 px 200 (64) -> 108 (4); ResNet-18 64 px 3.76 (128) -> 3.15 (32); CIFAR ResNet-50
#: 52.4 (128) -> 30.7 (8); VGG-11 3.58 (128) -> 3.11 (32); a ViT and a 4-block conv net flat (docs/performance.md).
CALL_ACTIVATION_BYTES = 8 * 2**20
_UNKNOWN = 2**62  #: images per call where the activations could not be measured: no bound


class WithDescriptor(torch.nn.Module):
    """An amortised model (``forward(x, i)``) at a fixed invariance descriptor ``i [K]``: ``forward(x)``."""

    def __init__(self, model: torch.nn.Module, invariance: Sequence[float]) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("invariance", torch.as_tensor(list(invariance), dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x, self.invariance.to(x.device))


def load_model(
    name: str, checkpoint: str | os.PathLike | None = None, *, invariance: Sequence[float] | None = None, **kw: Any
) -> torch.nn.Module:
    """An invfast model by name (``invfast.models.create``), with weights from ``checkpoint`` if given.

    Amortised models (Hyper-ResNet, Prompt-ViT) are measured at the descriptor ``invariance``
    (e.g. ``[1, 0]``: spatial), which they need.

    The checkpoint may be a state dict, or a dict holding one under 'encoder' (``invfast pretrain``'s
    model.pt), 'state_dict', 'model' (its checkpoint.pt) or 'backbone'; keys prefixed 'module.',
    'backbone.', 'encoder_q.' or 'encoder.' are accepted.
    A checkpoint that does not match the model raises ValueError naming the mismatching keys.
    """
    from invfast import models

    amortised = name.startswith(("hyper-", "prompt-"))
    if amortised and invariance is None:
        raise ValueError(
            f"model {name!r} is amortised: give the invariance descriptor to measure it at "
            "(invariance=[1, 0] / --invariance 1,0)"
        )
    if invariance is not None and not amortised:
        raise ValueError(f"model {name!r} takes no invariance descriptor; drop invariance / --invariance")
    from invfast.models.library import is_library_spec
    from invfast.models.registry import create_library_model

    if is_library_spec(name):
        if invariance is not None:
            raise ValueError(f"model {name!r} takes no invariance descriptor; drop invariance / --invariance")
        return create_library_model(name, checkpoint, **kw)
    try:
        model = models.create(name, **kw)
    except (KeyError, ValueError) as e:
        raise ValueError(
            f"unknown model {name!r}: invfast's own are {', '.join(getattr(models, 'ARCHITECTURES', []))}; "
            "another library's by name: timm:NAME, torchvision:NAME, hf:NAME, open_clip:NAME; any other as a "
            "factory module:callable (e.g. torchvision.models:resnet50)"
        ) from e
    if checkpoint is not None:
        load_checkpoint(model, checkpoint)
    if invariance is not None:
        model = WithDescriptor(model, invariance)
    return model


# ---------------------------------------------------------------------------------------------- features
@dataclass
class FeatureExtractor:
    """Images -> pooled features ``[B, D]`` float32: scaling to [0, 1], optional centre crop,
    ImageNet normalisation, ``channels_last`` and autocast (bf16/fp16) where asked, in chunks of
    ``forward_batch`` images. ``layers``: module paths whose pooled activations :meth:`features` also
    returns, caught with forward hooks in the same pass (:mod:`invfast.measure.layers`). ``units``: what
    :meth:`features_and_units` gives as each layer's units, its pooled channels ('channels') or every
    activation flattened ('elements', :mod:`invfast.measure.units`). ``threads``: torch's intra-op threads of
    the model calls on the CPU, whatever the caller's count is then (None: the caller's). On the CPU the model's
    ``nn.MaxPool2d`` modules pool channels-last copies of NCHW inputs, the same bits faster
    (:mod:`invfast.measure.cpu_pooling`), until :meth:`close`."""

    model: Callable[[torch.Tensor], torch.Tensor]
    device: torch.device
    dtype: torch.dtype | None = None
    channels_last: bool = False
    crop: int | None = None
    normalize: bool = True
    forward_batch: int = 256
    layers: Sequence[str] | None = None
    units: str = "channels"
    split_forward: bool | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        self._mean = torch.tensor(IMAGENET_MEAN, device=self.device).view(1, 3, 1, 1)
        self._std = torch.tensor(IMAGENET_STD, device=self.device).view(1, 3, 1, 1)
        self.calls = 0
        self._per_call: dict[tuple[Any, ...], int] = {}  # images per CPU model call, by input shape and dtype
        paths = resolve_layers(self.model, self.layers)
        self.layer_names = list(paths)
        self.elements = check_units(self.units) == "elements"
        self._tap = LayerTap(self.model, paths, self.elements) if self.layer_names != [OUTPUT] else None
        on_cpu = self.device.type == "cpu"
        # removed at close()
        self._pool_hooks = nhwc_max_pools(self.model) if on_cpu and isinstance(self.model, torch.nn.Module) else []
        # measured in eval mode; the user's training flags come back at close()
        modules = list(self.model.modules()) if isinstance(self.model, torch.nn.Module) else []
        self._modes = [(m, m.training) for m in modules]
        for m in modules:
            m.training = False

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, non_blocking=True)
        x = x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()
        if self.crop is not None:
            h, w = x.shape[-2:]
            if self.crop > min(h, w):
                raise ValueError(f"crop={self.crop} is larger than the images ({h}x{w})")
            top, left = (h - self.crop) // 2, (w - self.crop) // 2
            x = x[..., top : top + self.crop, left : left + self.crop]
        if self.normalize:
            if x.shape[1] != 3:
                raise ValueError(
                    f"ImageNet normalisation needs 3-channel images, got {x.shape[1]} channels; pass normalize=False"
                )
            x = (x - self._mean) / self._std
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def features(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """Pooled features float32 ``[B, D_layer]`` of every measured layer, by name, from one forward
        pass per chunk of ``forward_batch`` images."""
        return self.features_and_units(images)[0]

    def features_and_units(self, images: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """:meth:`features` and, from the same forward passes, every layer's units float32 ``[B, U_layer]``:
        the pooled features themselves (``units='channels'``, the same tensors) or every activation flattened
        (``'elements'``: ``U = C*H*W``; what the model returns is its own elements)."""
        outs: dict[str, list[torch.Tensor]] = {n: [] for n in self.layer_names}
        units: dict[str, list[torch.Tensor]] = {n: [] for n in self.layer_names}
        for s in range(0, images.shape[0], self.forward_batch):
            got, elements = self._forward(self.prepare(images[s : s + self.forward_batch]))
            self.calls += 1
            for name, v in got.items():
                outs[name].append(v)
                units[name].append(elements.get(name, v))
        return _joined(outs), _joined(units)

    def images_per_call(self, x: torch.Tensor) -> int:
        """Images per model call on the CPU for inputs like ``x`` [B, C, H, W]: the most whose largest activation
        (of any module, measured once per input shape and dtype on one image) fits :data:`CALL_ACTIVATION_BYTES`,
        at least 1 (unbounded for a model that fails on one image alone, or a callable that is not a module)."""
        if not isinstance(self.model, torch.nn.Module):
            return _UNKNOWN
        key = (tuple(x.shape[1:]), x.dtype)
        n = self._per_call.get(key)
        if n is None:
            with self._precision():
                largest = _largest_activation_bytes(self.model, x[:1])
            n = max(1, CALL_ACTIVATION_BYTES // largest) if largest else _UNKNOWN
            if self._tap is not None:
                self._tap.discard()
            self._per_call[key] = n
        return n

    def _forward(self, x: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """One chunk of ``x`` [B, ...] through the model: the layers' pooled features float32 [B, D] and, with
        ``units='elements'``, their elements, by name. On the CPU (unless :attr:`split_forward` is False) the
        chunk runs as sub-batches of :meth:`images_per_call` images (no more than B / threads, so every thread
        has work), which torch's threads take in turn, each at one intra-op thread."""
        if self.device.type != "cpu":
            return self._call(x)
        threads = self.threads or torch.get_num_threads()
        split = self.split_forward is not False and isinstance(self.model, torch.nn.Module)
        parts = torch.split(x, min(self.images_per_call(x), -(-x.shape[0] // threads))) if split else (x,)
        if len(parts) == 1:
            with at_threads(threads):
                return self._call(x)
        if threads == 1:
            with at_threads(1):
                return _cat_parts([self._call(part) for part in parts])
        return _cat_parts(self._on_threads(parts, threads))

    def _on_threads(self, parts: Sequence[torch.Tensor], threads: int) -> list[Any]:
        """``self._call`` of every part, in order, the parts taken in turn by ``min(threads, len(parts))`` threads,
        each at one intra-op thread (with the caller's grad and inference mode); the first error is raised."""
        inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
        done: list[Any] = [None] * len(parts)
        turn = itertools.count()  # next() on it is atomic under the GIL: each part is taken once
        failed: list[BaseException] = []

        def work() -> None:
            with torch.inference_mode() if inference else torch.set_grad_enabled(grad):
                while not failed and (i := next(turn)) < len(parts):
                    try:
                        done[i] = self._call(parts[i])
                    except BaseException as e:
                        failed.append(e)
                        raise

        with at_threads(1), ThreadPoolExecutor(min(threads, len(parts))) as pool:
            for f in [pool.submit(work) for _ in range(min(threads, len(parts)))]:
                f.result()
        return done

    def _precision(self) -> Any:
        """Autocast to :attr:`dtype` where it is bf16/fp16, else nothing."""
        if self.dtype in (torch.bfloat16, torch.float16):
            return torch.autocast(self.device.type, dtype=self.dtype)
        return contextlib.nullcontext()

    def _call(self, x: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        with self._precision():
            f = self.model(x)
        got, elements = self._tap.take(f) if self._tap is not None else ({OUTPUT: pooled_output(f)}, {})
        for v in got.values():
            if not isinstance(v, torch.Tensor) or v.dim() != 2 or v.shape[0] != x.shape[0]:
                shape = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
                raise ValueError(
                    f"the model must return pooled features [B, D], one row per image (this call: {x.shape[0]} "
                    f"images), got {shape}; pass a feature extractor (e.g. model.forward_features or the backbone "
                    "without its head), or measure named layers (layers=...)"
                )
        return {n: v.float() for n, v in got.items()}, elements

    @property
    def map_shapes(self) -> dict[str, tuple[int, ...]]:
        """Each hooked layer's activation shape per image (``(C, H, W)`` for feature maps), by name, as seen
        in the latest forward pass with ``units='elements'``; empty otherwise."""
        return dict(self._tap.shapes) if self._tap is not None else {}

    def close(self) -> None:
        """Remove the forward hooks from the model and give its modules their training flags back (it is the
        user's: left as it was given). Closing twice does nothing more."""
        if self._tap is not None:
            self._tap.close()
            self._tap = None
        for h in self._pool_hooks:
            h.remove()
        self._pool_hooks = []
        for m, mode in self._modes:
            m.training = mode
        self._modes = []

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Pooled features ``[B, D]`` of the (single) measured layer."""
        if len(self.layer_names) != 1:
            raise ValueError(f"this extractor measures {len(self.layer_names)} layers; call .features(images)")
        return self.features(images)[self.layer_names[0]]


def _joined(parts: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {n: v[0] if len(v) == 1 else torch.cat(v) for n, v in parts.items()}


def _cat_parts(done: list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]) -> Any:
    """The sub-batches' ``(features, elements)`` joined in order, at one intra-op thread: a copy this small
    waits longer for a descheduled peer than it saves."""
    with at_threads(1):
        return (
            {n: torch.cat([d[0][n] for d in done]) for n in done[0][0]},
            {n: torch.cat([d[1][n] for d in done]) for n in done[0][1]},
        )


def _largest_activation_bytes(model: torch.nn.Module, x1: torch.Tensor) -> int:
    """Bytes of the largest tensor that ``model`` or any of its modules returns on ``x1`` [1, ...] (0 where the
    model fails on it: then nothing is known, and the caller calls the model whole, where its error shows)."""
    largest = 0

    def keep(module: Any, inputs: Any, output: Any) -> None:
        nonlocal largest
        for v in output if isinstance(output, (tuple, list)) else (output,):
            if isinstance(v, torch.Tensor):
                largest = max(largest, v.numel() * v.element_size())

    handles = [m.register_forward_hook(keep) for m in model.modules()]
    try:
        model(x1)
    except Exception:  # a model that needs more than one image: measured whole
        return 0
    finally:
        for h in handles:
            h.remove()
    return largest


def model_checksum(model: Any) -> Any:
    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            ps = [p.detach().double().sum().item() for p in model.state_dict().values() if p.is_floating_point()]
        return [type(model).__name__, len(ps), float(sum(ps))]
    return [type(model).__name__]


def setup_model(model: Any, checkpoint: Any, device: torch.device, dtype: Any, channels_last: bool | None):
    if isinstance(model, str):
        model = load_model(model, checkpoint)
    elif checkpoint is not None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError("checkpoint can only be loaded into an nn.Module")
        model = _own_copy(model, checkpoint, device, channels_last)
        load_checkpoint(model, checkpoint)
    else:
        model = _own_copy(model, None, device, channels_last)
    if not callable(model):
        raise TypeError(
            f"model must be an nn.Module, a callable images -> features or a model name, got {type(model).__name__}"
        )
    if dtype is not None and dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be None, torch.float32, torch.bfloat16 or torch.float16, got {dtype}")
    if channels_last is None:
        channels_last = device.type == "cuda"
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
    return model, channels_last


def _on(t: torch.Tensor, device: torch.device) -> bool:
    """Whether ``t`` is on ``device`` (a CUDA device without an index: the current one)."""
    if t.device.type != device.type:
        return False
    if device.type != "cuda":
        return True
    index = device.index if device.index is not None else torch.cuda.current_device()
    return t.device.index == index


def _own_copy(model: Any, checkpoint: Any, device: torch.device, channels_last: bool | None) -> Any:
    """The user's module itself where measuring it changes nothing of it, else a copy to change: loading a
    checkpoint, moving it to another device or converting it to channels-last would otherwise be done to the
    user's model (its training flags are set and restored by :class:`FeatureExtractor`)."""
    if not isinstance(model, torch.nn.Module):
        return model
    tensors = [*model.parameters(), *model.buffers()]
    moves = any(not _on(t, device) for t in tensors)
    converts = (device.type == "cuda" if channels_last is None else channels_last) and any(
        t.dim() == 4 for t in tensors
    )
    if checkpoint is None and not moves and not converts:
        return model
    try:
        return copy.deepcopy(model)
    except Exception as e:  # a module that cannot be copied (an unpicklable attribute): changed in place, said so
        warnings.warn(
            f"the model could not be copied ({type(e).__name__}: {e}); it is measured in place, so the checkpoint, "
            "device or memory format the measurement needs is applied to your model itself",
            RuntimeWarning,
            stacklevel=3,
        )
        return model
