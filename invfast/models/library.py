"""Models of other libraries by name: ``timm:NAME``, ``torchvision:NAME``, ``hf:NAME``, ``open_clip:NAME``.

Each spec builds the library's own model (random weights unless its own keyword arguments say otherwise,
e.g. ``pretrained=True`` for timm, ``weights="DEFAULT"`` for torchvision, a local folder or a cached hub name
for ``hf:``), loads a ``--checkpoint`` into it exactly (a torchvision model takes a torchvision file, a timm
model a timm file: no renaming), removes the classification head and wraps it as a :class:`LibraryModel`:
images ``[B, 3, H, W]`` normalised with ImageNet's mean/std (what every invfast path feeds a model) ->
pooled features ``[B, D]``. Where the library's own normalisation differs (CLIP's, timm's ``(0.5, 0.5, 0.5)``)
the wrapper re-maps the input to it, so the model sees exactly what its library's eval transform gives.
:attr:`LibraryModel.input` is that eval transform's geometry (:class:`InputSpec`: the shorter side resized to
``resize`` px, centre-cropped to ``size``), which ``invfast measure`` / ``invfast features`` use by default.

The libraries are optional: a spec of one that is not installed raises one line naming the package.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
from invfast.models.outputs import pooled_output

#: spec prefix -> (the module imported, the pip package that provides it)
LIBRARIES: dict[str, tuple[str, str]] = {
    "timm": ("timm", "timm"),
    "torchvision": ("torchvision", "torchvision"),
    "hf": ("transformers", "transformers"),
    "open_clip": ("open_clip", "open_clip_torch"),
}


@dataclass(frozen=True)
class InputSpec:
    """The eval-time input a model expects: the shorter side resized to ``resize`` px, centre-cropped to a
    ``size`` x ``size`` square, normalised with ``mean`` / ``std`` (per RGB channel, on [0, 1] values)."""

    size: int
    resize: int
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def __post_init__(self) -> None:
        for k in ("size", "resize"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"InputSpec.{k} must be an int >= 1 pixel, got {v!r}")
        if self.resize < self.size:
            raise ValueError(f"InputSpec.resize ({self.resize}) must be at least size ({self.size})")
        for k in ("mean", "std"):
            v = getattr(self, k)
            if len(v) != 3 or not all(math.isfinite(float(x)) for x in v):
                raise ValueError(f"InputSpec.{k} must be 3 finite numbers, got {v!r}")
        if any(float(s) <= 0 for s in self.std):
            raise ValueError(f"InputSpec.std must be > 0, got {self.std!r}")


def is_library_spec(spec: Any) -> bool:
    """True for ``"timm:NAME"``, ``"torchvision:NAME"``, ``"hf:NAME"`` or ``"open_clip:NAME"``."""
    return isinstance(spec, str) and spec.partition(":")[0] in LIBRARIES and bool(spec.partition(":")[2])


class LibraryModel(nn.Module):
    """A model of another library as invfast measures it: ``forward(x [B, 3, H, W], ImageNet-normalised)`` ->
    ``[B, D]`` float features (the library's pooled output, its head removed).

    Attributes: ``model`` (the library's module; its state dict is this module's, under ``model.``), ``spec``
    (``"timm:resnet18"``), ``input`` (:class:`InputSpec`), ``head`` (the removed head's module path, or None),
    ``call`` (how the library's module is called: ``"images"`` or ``"pixel_values"``)."""

    def __init__(self, model: nn.Module, spec: str, input: InputSpec, head: str | None, call: str = "images"):
        super().__init__()
        if call not in ("images", "pixel_values"):
            raise ValueError(f"call must be 'images' or 'pixel_values', got {call!r}")
        self.model, self.spec, self.input, self.head, self.call = model, spec, input, head, call
        self.arch = spec
        m_in, s_in = torch.tensor(IMAGENET_MEAN), torch.tensor(IMAGENET_STD)
        m, s = torch.tensor(input.mean, dtype=torch.float32), torch.tensor(input.std, dtype=torch.float32)
        self.remaps = not (torch.equal(m, m_in) and torch.equal(s, s_in))
        # x = (u - m_in) / s_in  ->  (u - m) / s = x * (s_in / s) + (m_in - m) / s
        self.register_buffer("_scale", (s_in / s).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("_shift", ((m_in - m) / s).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> Any:
        if self.remaps:
            scale, shift = cast(torch.Tensor, self._scale), cast(torch.Tensor, self._shift)
            x = x * scale.to(x) + shift.to(x)
        out = self.model(pixel_values=x) if self.call == "pixel_values" else self.model(x)
        return pooled_output(out)

    def extra_repr(self) -> str:
        return f"spec={self.spec!r}, input={self.input}, head removed={self.head!r}"


def build_library_model(spec: str, **kw: Any) -> tuple[nn.Module, InputSpec, str]:
    """The library's own model for ``spec`` (``"timm:NAME"``, ``"torchvision:NAME"``, ``"hf:NAME"``,
    ``"open_clip:NAME"``), its head still on, with its eval input and how it is called (``"images"`` or
    ``"pixel_values"``); ``kw`` go to the library's constructor. :func:`invfast.models.create_library_model` loads a
    checkpoint into it and wraps it (:func:`wrap_library_model`).

    Raises:
        ValueError: not a library spec, or the library refuses the name or an argument.
        ImportError: the library is not installed (one line naming the package to install).
    """
    if not is_library_spec(spec):
        raise ValueError(f"{spec!r} is not a library model spec: give {' | '.join(p + ':NAME' for p in LIBRARIES)}")
    prefix, _, name = spec.partition(":")
    lib = _import(prefix, spec)
    try:
        return _BUILDERS[prefix](lib, name, dict(kw))
    except (ImportError, TypeError, ValueError, KeyError, RuntimeError, OSError) as e:  # an unknown name or argument
        raise ValueError(f"cannot build {spec!r}: {type(e).__name__}: {e}") from e


def wrap_library_model(spec: str, model: nn.Module, input: InputSpec, call: str) -> LibraryModel:
    """``model`` (built by :func:`build_library_model`, weights loaded) with its classification head removed, as
    invfast measures it."""
    return LibraryModel(model, spec, input, _remove_head(spec.partition(":")[0], model), call)


def _import(prefix: str, spec: str) -> Any:
    module, package = LIBRARIES[prefix]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"model {spec!r} needs the {package!r} package, which is not importable here ({e}): pip install {package}"
        ) from e


def model_args(pairs: list[str] | None) -> dict[str, Any]:
    """``--model-arg KEY=VALUE`` strings as constructor keyword arguments: a VALUE that reads as a Python
    literal (``3``, ``0.5``, ``True``, ``None``, ``(1, 2)``, ``'x'``) is that value, anything else the string."""
    import ast

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, eq, value = pair.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise ValueError(f"--model-arg must be KEY=VALUE with KEY a Python name, got {pair!r}")
        if key in out:
            raise ValueError(f"--model-arg {key} is given twice")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


# --------------------------------------------------------------------------------------- the libraries
def _timm(timm: Any, name: str, kw: dict[str, Any]) -> tuple[nn.Module, InputSpec, str]:
    kw.setdefault("pretrained", False)
    model = timm.create_model(name, **kw)
    resolve = getattr(timm.data, "resolve_model_data_config", None)
    cfg = resolve(model) if resolve is not None else timm.data.resolve_data_config({}, model=model)
    size = int(cfg["input_size"][-1])
    crop_pct = float(cfg.get("crop_pct") or 1.0)
    return (
        model,
        InputSpec(size, max(size, int(math.floor(size / crop_pct))), _rgb(cfg["mean"]), _rgb(cfg["std"])),
        "images",
    )


def _torchvision(tv: Any, name: str, kw: dict[str, Any]) -> tuple[nn.Module, InputSpec, str]:
    kw.setdefault("weights", None)
    model = tv.models.get_model(name, **kw)
    input = InputSpec(224, 256)
    try:
        t = tv.models.get_model_weights(name).DEFAULT.transforms()
        crop, resize = int(t.crop_size[0]), int(t.resize_size[0])
        input = InputSpec(crop, max(crop, resize), _rgb(t.mean), _rgb(t.std))
    except (AttributeError, KeyError, ValueError, TypeError, IndexError):  # no weights to read it from: the default
        pass
    return model, input, "images"


def _hf(transformers: Any, name: str, kw: dict[str, Any]) -> tuple[nn.Module, InputSpec, str]:
    model = transformers.AutoModel.from_pretrained(name, **kw)
    if hasattr(model, "vision_model") and hasattr(model, "text_model"):  # CLIP-like: its image tower
        model = model.vision_model
    size = _hf_side(getattr(getattr(model, "config", None), "image_size", None)) or 224
    resize, mean, std = size, IMAGENET_MEAN, IMAGENET_STD
    try:
        proc = transformers.AutoImageProcessor.from_pretrained(name)
    except (OSError, ValueError, KeyError, ImportError):  # no processor saved with the model: its config's size
        proc = None
    if proc is not None:
        crop = _hf_side(getattr(proc, "crop_size", None)) if getattr(proc, "do_center_crop", False) else None
        short = _hf_side(getattr(proc, "size", None))
        size = crop or short or size
        resize = max(size, short or size)
        mean = _rgb(getattr(proc, "image_mean", None) or IMAGENET_MEAN)
        std = _rgb(getattr(proc, "image_std", None) or IMAGENET_STD)
    return model, InputSpec(size, resize, mean, std), "pixel_values"


def _open_clip(open_clip: Any, name: str, kw: dict[str, Any]) -> tuple[nn.Module, InputSpec, str]:
    kw.setdefault("pretrained", None)
    visual = open_clip.create_model(name, **kw).visual
    side = getattr(visual, "image_size", 224)
    side = int(side[-1] if isinstance(side, (tuple, list)) else side)
    mean = getattr(visual, "image_mean", None) or open_clip.OPENAI_DATASET_MEAN
    std = getattr(visual, "image_std", None) or open_clip.OPENAI_DATASET_STD
    return visual, InputSpec(side, side, _rgb(mean), _rgb(std)), "images"


_BUILDERS: dict[str, Callable[[Any, str, dict[str, Any]], tuple[nn.Module, InputSpec, str]]] = {
    "timm": _timm,
    "torchvision": _torchvision,
    "hf": _hf,
    "open_clip": _open_clip,
}


def _rgb(v: Any) -> tuple[float, float, float]:
    vals = tuple(float(x) for x in v)
    if len(vals) == 1:
        vals = vals * 3
    if len(vals) != 3:
        raise ValueError(f"expected 3 channel values, got {v!r}")
    return vals


def _hf_side(v: Any) -> int | None:
    """A Hugging Face size: an int, or a dict with 'shortest_edge' or 'height' (square inputs)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, (tuple, list)) and v:
        return int(v[-1])
    if isinstance(v, Mapping):
        for k in ("shortest_edge", "height"):
            if isinstance(v.get(k), int):
                return int(v[k])
    return None


def _remove_head(prefix: str, model: nn.Module) -> str | None:
    """Replace the classification head by the identity (timm's ``reset_classifier(0)``; torchvision's last
    ``nn.Linear``); returns its module path (None where the model has none, as Hugging Face's ``AutoModel``)."""
    if prefix == "timm" and hasattr(model, "reset_classifier"):
        get = getattr(model, "get_classifier", None)
        head = get() if callable(get) else None
        if isinstance(head, nn.Identity) or head is None:
            return None
        path = next((n for n, m in model.named_modules() if m is head), "classifier")
        getattr(model, "reset_classifier")(0)  # noqa: B009  (timm's method; nn.Module's typing does not know it)
        return path
    if prefix != "torchvision":
        return None
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        return None
    path = linears[-1][0]
    parent_path, _, attr = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    if isinstance(parent, nn.Sequential):
        parent[int(attr)] = nn.Identity()
    else:
        setattr(parent, attr, nn.Identity())
    return path


__all__ = [
    "LIBRARIES",
    "InputSpec",
    "LibraryModel",
    "build_library_model",
    "is_library_spec",
    "model_args",
    "wrap_library_model",
]
