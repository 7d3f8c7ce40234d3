"""The few ``torch.distributed`` pieces pretraining needs: process-group setup from torchrun's
environment, and all-gathers with and without gradient. Everything degrades to the identity in
a single process."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from invfast.runtime.launch import Rank, current_rank


def init_from_env(device: str = "auto") -> tuple[Rank, torch.device]:
    """Join the process group when launched by torchrun with more than one process (``WORLD_SIZE`` > 1;
    :func:`invfast.runtime.launch.group_backend`: NCCL where each rank has its own GPU, gloo otherwise, with
    :func:`invfast.runtime.launch.join_group`'s timeout) and pick the device
    (:func:`invfast.runtime.devices.resolve_device`: 'auto', 'cpu', 'cuda' or 'cuda:N'; each process takes GPU
    ``LOCAL_RANK``)."""
    from invfast.runtime.devices import resolve_device
    from invfast.runtime.launch import group_backend, join_group

    dev = resolve_device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        join_group(group_backend(dev))
    return current_rank(), dev


def all_gather_nograd(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x [b, ...]`` from every rank in rank order -> ``[world·b, ...]`` (no gradient)."""
    d = current_rank()
    if d.world_size == 1:
        return x
    out = [torch.empty_like(x) for _ in range(d.world_size)]
    dist.all_gather(out, x.contiguous())
    return torch.cat(out, dim=0)


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        d = current_rank()
        ctx.rank, ctx.b = d.rank, x.shape[0]
        out = [torch.empty_like(x) for _ in range(d.world_size)]
        dist.all_gather(out, x.contiguous())
        return torch.cat(out, dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.rank * ctx.b : (ctx.rank + 1) * ctx.b]


def all_gather_grad(x: torch.Tensor) -> torch.Tensor:
    """Like :func:`all_gather_nograd`, but gradients flow back to every rank's slice (summed over ranks)."""
    if current_rank().world_size == 1:
        return x
    return _GatherWithGrad.apply(x)
