"""Which layers of a model are measured, and how their activations are caught in one forward pass.

>>> list(resolve_layers(resnet, "all"))      # ['layer1', 'layer2', 'layer3', 'layer4'] for a ResNet
>>> resolve_layers(model, "layer3,output")   # {'layer3': <module path>, 'output': None}

A layer is a path of ``model.named_modules()`` (torchvision-style for the ResNets: ``layer1`` ..
``layer4``, ``avgpool``, ``fc``) or ``output`` (what the model returns). Activations are pooled to
``[B, D]``: global average over space for ``[B, C, H, W]``, over tokens for ``[B, T, D]``; with
``units='elements'`` every activation is also kept flattened, ``[B, C*H*W]`` (:func:`flatten`), for the
per-unit measures (:mod:`invfast.measure.units`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["OUTPUT", "resolve_layers", "pool", "flatten", "LayerTap"]

OUTPUT = "output"  #: the name of what the model itself returns


_WRAPPERS = ("", "model.", "encoder.", "backbone.")  # where wrappers (WithDescriptor, ...) keep the network


def _aliases(model: torch.nn.Module) -> dict[str, str]:
    """torchvision's stage names for invfast's (Hyper-)ResNets, whose blocks are one list: ``layer<i>`` is
    the last block of stage i, ``stem`` the stem."""
    from invfast.models.resnet import LAYOUTS

    names = dict(model.named_modules())
    for prefix in _WRAPPERS:
        net = names.get(prefix.rstrip("."))
        depth = getattr(net, "depth", None)
        if net is None or depth not in LAYOUTS or not isinstance(getattr(net, "blocks", None), torch.nn.Module):
            continue
        counts = LAYOUTS[depth][1]
        if len(net.blocks) != sum(counts):
            continue
        ends = [sum(counts[: i + 1]) - 1 for i in range(len(counts))]
        out = {f"layer{i + 1}": f"{prefix}blocks.{e}" for i, e in enumerate(ends)}
        if isinstance(getattr(net, "stem", None), torch.nn.Module):
            out["stem"] = f"{prefix}stem"
        return out
    return {}


def _stages(model: torch.nn.Module, aliases: dict[str, str]) -> list[str]:
    """The stage names ``all`` means for ``model``: ResNet stages, or the blocks of a ViT-like model."""
    names = dict(model.named_modules())
    if all(f"layer{i}" in aliases for i in range(1, 5)):
        return [f"layer{i}" for i in range(1, 5)]
    for prefix in _WRAPPERS:
        stages = [f"{prefix}layer{i}" for i in range(1, 5)]
        if all(s in names for s in stages):
            return stages
        blocks = names.get(f"{prefix}blocks")
        if isinstance(blocks, (torch.nn.ModuleList, torch.nn.Sequential)) and len(blocks):
            return [f"{prefix}blocks.{i}" for i in range(len(blocks))]
    raise ValueError(
        "layers='all' needs a model with ResNet stages (layer1..layer4) or a 'blocks' list; name the "
        "layers instead, as paths of model.named_modules() (e.g. layers='features.3,features.6')"
    )


def resolve_layers(model: Any, layers: str | Sequence[str] | None) -> dict[str, str | None]:
    """Layer name -> module path of ``model`` for ``layers`` ('all', 'layer1,layer4', a list, or None =
    ``{'output': None}``; ``output``, what the model returns, has no path).

    Names are paths of ``model.named_modules()``; on invfast's ResNets, torchvision's ``layer1`` ..
    ``layer4`` and ``stem`` name the ends of the stages; a name that ends one path uniquely (``layer3``
    inside a wrapper's ``model.layer3``) resolves to it. Unknown names raise one ValueError listing choices.
    """
    if layers is None:
        return {OUTPUT: None}
    items = [s.strip() for s in layers.split(",")] if isinstance(layers, str) else [str(s).strip() for s in layers]
    items = [s for s in items if s]
    if not items:
        raise ValueError("layers is empty; give 'all', module paths like 'layer1,layer4', or 'output'")
    if not isinstance(model, torch.nn.Module):
        if items != [OUTPUT]:
            raise ValueError(
                f"layers {items} need an nn.Module (hooks on its submodules); this model is a "
                f"{type(model).__name__}: measure its output only (layers=None)"
            )
        return {OUTPUT: None}
    names = dict(model.named_modules())
    aliases = _aliases(model)
    out: list[tuple[str, str | None]] = []
    for it in items:
        if it == "all":
            out.extend((n, aliases.get(n, n)) for n in _stages(model, aliases))
        elif it == OUTPUT:
            out.append((it, None))
        elif it in aliases:
            out.append((it, aliases[it]))
        elif it in names:
            out.append((it, it))
        else:
            ends = [n for n in names if n.endswith("." + it)]
            if len(ends) != 1:
                top = list(aliases) + [n for n in names if n and "." not in n]
                raise ValueError(
                    f"model has no layer {it!r}; choose 'all', '{OUTPUT}' or paths of "
                    f"model.named_modules(), e.g. {top[:10]}"
                )
            out.append((it, ends[0]))
    keys = [n for n, _ in out]
    dup = sorted({n for n in keys if keys.count(n) > 1})
    if dup:
        raise ValueError(f"layers {dup} are listed more than once")
    return dict(out)


def _tensor(a: Any, name: str) -> torch.Tensor:
    """The activation tensor of a layer's output (the first item of a tuple or list)."""
    if isinstance(a, (tuple, list)) and a and isinstance(a[0], torch.Tensor):
        a = a[0]
    if not isinstance(a, torch.Tensor):
        raise ValueError(f"layer {name!r} returned {type(a).__name__}, not a tensor; choose another layer")
    return a


def flatten(a: Any, name: str) -> torch.Tensor:
    """Every activation of a layer as its own unit: float32 ``[B, C*H*W]`` (``[B, T*D]`` for tokens), in the
    logical C, H, W order whatever the memory format."""
    a = _tensor(a, name)
    if a.dim() < 2:
        raise ValueError(f"layer {name!r} gave activations of shape {tuple(a.shape)}; expected [B, ...]")
    return a.float().reshape(a.shape[0], -1)


def pool(a: Any, name: str) -> torch.Tensor:
    """An activation pooled to float32 ``[B, D]``: mean over space ([B, C, H, W]) or tokens ([B, T, D])."""
    a = _tensor(a, name)
    if a.dim() == 4:
        return a.float().mean(dim=(2, 3))
    if a.dim() == 3:
        return a.float().mean(dim=1)
    if a.dim() == 2:
        return a.float()
    raise ValueError(
        f"layer {name!r} gave activations of shape {tuple(a.shape)}; expected [B, C, H, W], [B, T, D] or [B, D]"
    )


class LayerTap:
    """Forward hooks on the named layers of ``model`` (name -> module path, as :func:`resolve_layers` gives)
    that keep each one's pooled activations of the latest forward pass; ``OUTPUT`` is the model's return value.
    With ``elements``, each layer's flattened activations too (:attr:`elements`, taken by :meth:`take`)."""

    def __init__(self, model: Any, layers: dict[str, str | None], elements: bool = False) -> None:
        self.layers = list(layers)
        self.keep_elements = elements
        self._local = threading.local()  # each thread's forward pass catches its own activations
        self.shapes: dict[str, tuple[int, ...]] = {}  # each layer's activation shape per image, with elements
        self._handles = []
        modules = dict(model.named_modules()) if isinstance(model, torch.nn.Module) else {}
        for name, path in layers.items():
            if path is not None:
                self._handles.append(modules[path].register_forward_hook(self._hook(name)))

    @property
    def caught(self) -> dict[str, torch.Tensor]:
        """This thread's pooled activations of its latest forward pass, by layer."""
        return self._local.__dict__.setdefault("caught", {})

    @property
    def elements(self) -> dict[str, torch.Tensor]:
        """This thread's flattened activations of its latest forward pass, by layer (with ``elements``)."""
        return self._local.__dict__.setdefault("elements", {})

    def _hook(self, name: str) -> Any:
        def hook(module: Any, inputs: Any, output: Any) -> None:
            self.caught[name] = pool(output, name)
            if self.keep_elements:
                self.elements[name] = flatten(output, name)
                self.shapes[name] = tuple(output.shape[1:])

        return hook

    def take(self, output: Any) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The pooled activations of the forward pass that returned ``output``, by layer (in order), and the
        flattened ones (empty unless ``elements``)."""
        if OUTPUT in self.layers:
            self.caught[OUTPUT] = output.float() if isinstance(output, torch.Tensor) else output
            if self.keep_elements and isinstance(output, torch.Tensor):
                self.elements[OUTPUT] = flatten(output, OUTPUT)
        missing = [n for n in self.layers if n not in self.caught]
        if missing:
            raise ValueError(f"layers {missing} did not run in the model's forward pass; choose layers it uses")
        out = {n: self.caught[n] for n in self.layers}
        elements = {n: self.elements[n] for n in self.layers if n in self.elements}
        self.discard()
        return out, elements

    def discard(self) -> None:
        """Forget this thread's activations of its latest forward pass (one that was not a measurement)."""
        self._local.caught, self._local.elements = {}, {}

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
