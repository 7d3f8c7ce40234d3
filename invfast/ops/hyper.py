"""Batched hypernetwork weight generation: every kernel of a Hyper-ResNet in one call.

Each per-kernel hypernetwork ends in ``Linear(H -> out*in*kh*kw)``; the output layers of all
L kernels are packed row-wise into ``weight [N, H]`` and ``bias [N]`` (kernel ``l`` owns rows
``offsets[l]:offsets[l+1]``). Given the hidden vectors ``hidden [B, L, H]`` of B descriptors,

    out[b, n] = bias[n] + weight[n] . hidden[b, l(n)]

is one grouped matrix product whose row ``b`` is the flat concatenation of every generated
conv weight in ``(out, in, kh, kw)`` layout. ``generate`` runs the compiled op
(``torch.ops.invfast.hyper_generate``, differentiable in ``hidden``, ``weight`` and ``bias``)
when it can serve, and the torch reference below otherwise.

Dispatch: the one dispatch table (:mod:`invfast.dispatch`, ``invfast info``). Under backend ``auto`` the
CPU kernel serves (AVX-512 row tiles, measured faster than the reference: docs/models.md); on CUDA the kernel
serves batches of at most ``dispatch.HYPER_KERNEL_MAX_B`` descriptors (measured 2.2-4.6x the reference at B = 1
and 8 on an H200, 0.71-0.75x at B = 64, where the reference serves) and the backward kernel every batch
(1.2-3.0x; docs/gpu.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from invfast import _loader, backend


def _check(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, offsets: Sequence[int]) -> list[int]:
    if not all(isinstance(t, torch.Tensor) for t in (hidden, weight, bias)):
        raise TypeError("hidden, weight and bias must be torch.Tensors")
    if hidden.dim() != 3:
        raise ValueError(f"hidden must be [B, L, H], got shape {tuple(hidden.shape)}")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[2]:
        raise ValueError(f"weight must be [N, H={hidden.shape[2]}], got shape {tuple(weight.shape)}")
    if bias.shape != (weight.shape[0],):
        raise ValueError(f"bias must be [N={weight.shape[0]}], got shape {tuple(bias.shape)}")
    offs = [int(o) for o in offsets]
    if (
        len(offs) != hidden.shape[1] + 1
        or offs[0] != 0
        or offs[-1] != weight.shape[0]
        or any(b < a for a, b in zip(offs, offs[1:]))
    ):
        raise ValueError(
            f"offsets must be L+1={hidden.shape[1] + 1} non-decreasing row starts from 0 to "
            f"N={weight.shape[0]}, got {len(offs)} entries"
        )
    if not (hidden.device == weight.device == bias.device):
        raise ValueError(
            f"hidden, weight and bias must be on one device, got {hidden.device}, {weight.device}, {bias.device}"
        )
    if not (hidden.dtype == weight.dtype == bias.dtype):
        raise TypeError(f"hidden, weight and bias must share a dtype, got {hidden.dtype}, {weight.dtype}, {bias.dtype}")
    return offs


@backend.register_reference("hyper_generate")
def hyper_generate_reference(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, offsets: Sequence[int]
) -> torch.Tensor:
    """Torch reference: hidden [B, L, H], weight [N, H], bias [N], offsets (L+1 ints) -> [B, N].

    One addmm per kernel (memory stays at the size of the output, also for ResNet-50)."""
    offs = [int(o) for o in offsets]
    if len(offs) == 1:
        return weight.new_empty((hidden.shape[0], 0))
    return torch.cat(
        [torch.addmm(bias[a:b], hidden[:, j], weight[a:b].t()) for j, (a, b) in enumerate(zip(offs, offs[1:]))], 1
    )


@backend.register_reference("hyper_generate_backward")
def hyper_generate_backward_reference(
    grad: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor, offsets: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Torch reference of the gradients: grad [B, N] -> (grad_hidden [B, L, H], grad_weight [N, H], grad_bias [N])."""
    offs = [int(o) for o in offsets]
    gh = torch.zeros_like(hidden)
    gw = torch.empty_like(weight)
    for j, (a, b) in enumerate(zip(offs, offs[1:])):
        g = grad[:, a:b]
        gw[a:b] = g.t() @ hidden[:, j]
        gh[:, j] = g @ weight[a:b]
    return gh, gw, grad.sum(0)


def implementation(device: torch.device | str) -> str:
    """'compiled' or 'reference': what :func:`generate` runs on ``device`` under the current mode (the
    dispatch table's answer; 'compiled' mode on a device without a kernel raises, as :func:`generate` would)."""
    return "compiled" if backend.uses_kernel("hyper_generate", torch.device(device).type) else "reference"


def generate(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, offsets: Sequence[int]) -> torch.Tensor:
    """All generated kernels for B descriptors: hidden [B, L, H], weight [N, H], bias [N] (one dtype,
    one device), offsets (L + 1 ints) -> [B, N] (see module docstring); differentiable."""
    offs = _check(hidden, weight, bias, offsets)
    return backend.call("hyper_generate", hidden, weight, bias, offs)


def _register_compiled() -> None:
    if _loader.load() is None or "hyper_generate" not in backend.compiled_ops():
        return

    @torch.library.register_fake("invfast::hyper_generate")
    def _(hidden, weight, bias, offsets):
        return weight.new_empty((hidden.shape[0], weight.shape[0]))

    @torch.library.register_fake("invfast::hyper_generate_backward")
    def _(grad, hidden, weight, offsets):
        return torch.empty_like(hidden), torch.empty_like(weight), weight.new_empty((weight.shape[0],))

    def setup_context(ctx, inputs, output):
        hidden, weight, bias, offsets = inputs
        ctx.save_for_backward(hidden, weight)
        ctx.offsets = list(offsets)

    def backward(ctx, grad):
        hidden, weight = ctx.saved_tensors
        gh, gw, gb = torch.ops.invfast.hyper_generate_backward(grad.contiguous(), hidden, weight, ctx.offsets)
        need = ctx.needs_input_grad
        return (gh if need[0] else None, gw if need[1] else None, gb if need[2] else None, None)

    torch.library.register_autograd("invfast::hyper_generate", backward, setup_context=setup_context)


_register_compiled()
