"""A CPU-only stand-in for "the data lives on another device" (CI has no GPU).

Inside :func:`device_guard` every tensor created without an explicit ``device=`` lands on the
``meta`` device (``torch.set_default_device("meta")``), while the test's data stays on the CPU. A
:class:`~torch.overrides.TorchFunctionMode` then raises as soon as one op sees a meta tensor next to a
real one, which is what CUDA does with "Expected all tensors to be on the same device" when a helper
tensor was made on the CPU for CUDA data. It catches, on a machine without a GPU:

- ``torch.arange/tensor/zeros/ones/empty/full/linspace/eye/as_tensor(list)`` without ``device=`` that
  then meet the data (matmul, conv weights, grid_sample grids, ``torch.where``/``cat``/``stack``,
  indexing, ``copy_`` into an output buffer made without ``device=``);
- random draws ``torch.rand(..., generator=g)`` without ``device=`` (they land on meta, not on the
  generator's device; a CUDA generator would have raised there);
- ``.item()``/``bool()``/``float()`` on such tensors (meta tensors have no values).

``torch.as_tensor(tensor)`` keeps the tensor on its device and ``torch.as_tensor(ndarray)`` gives a CPU
tensor (as without a default device: host data, like ``torch.from_numpy``).
The guard is stricter than CUDA in one place, on purpose: a 0-dim tensor made without ``device=``
may mix with CUDA data but not with the guarded CPU data; creating it with ``device=`` of the data
fixes it, which the device rules ask for anyway.

It does not see a generator on one device drawing with ``device=`` another, nor ``.cpu()`` round
trips (the data is already on the CPU): the CUDA tier (``pytest -m cuda``) covers those.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten


class DeviceMixError(RuntimeError):
    """An op met a tensor created off the data's device (the CPU stand-in for a CUDA device error)."""


class _MixCheck(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.as_tensor and args and kwargs.get("device") is None:
            if isinstance(args[0], torch.Tensor):  # as without a default device: the tensor stays put
                kwargs = {**kwargs, "device": args[0].device}
            elif isinstance(args[0], np.ndarray):  # host data, like torch.from_numpy (which the guard cannot see)
                kwargs = {**kwargs, "device": "cpu"}
        flat, _ = tree_flatten((args, kwargs))
        meta = real = None
        for a in flat:
            if isinstance(a, torch.Tensor):
                if a.device.type == "meta":
                    meta = a
                else:
                    real = a
        if meta is not None and real is not None:
            name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
            raise DeviceMixError(
                f"device guard: {name} got a tensor created without device= (shape {tuple(meta.shape)}) next to "
                f"data on {real.device} (shape {tuple(real.shape)}); on a GPU this is 'Expected all tensors to be "
                "on the same device'. Create it with device= of the data it meets."
            )
        return func(*args, **kwargs)


@contextlib.contextmanager
def device_guard() -> Iterator[None]:
    """Run the body with the default device set to ``meta`` and meta/real mixing turned into errors."""
    previous = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        with _MixCheck():
            yield
    finally:
        # the CPU default is restored as "no default device": set_default_device("cpu") would leave a
        # device mode intercepting every torch call (and copying tensors) for the rest of the session
        torch.set_default_device(None if previous.type == "cpu" else previous)
