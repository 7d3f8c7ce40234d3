"""The configuration of a measurement: :class:`MeasureConfig`, validated once, and the resume
fingerprint derived from it.

>>> from invfast.measure import MeasureConfig
>>> cfg = MeasureConfig(grid_size=16, crop=224)
>>> cfg.replace(batch_size=64).batch_size
64

Every field changes the numbers of a measurement unless it is declared with
:func:`~invfast.config_base.scheduling` (with the reason); :func:`fingerprint` takes every other field, the
device and the invfast version, so a new option can never silently leave a stale state resumable.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import torch

from invfast.config_base import Config, declare
from invfast.measure.units import UNITS

__all__ = ["MeasureConfig", "fingerprint", "DTYPES"]

#: model precisions by name (``None``/'float32': no autocast)
DTYPES: dict[str, torch.dtype | None] = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class MeasureConfig(Config):
    """Everything that decides how :func:`invfast.measure_invariance` measures (model, data and
    transforms aside). Frozen; validated when made; ``replace(**changes)`` gives a new one. The fields by
    concern are :meth:`groups` (loading, statistics, execution, output); those declared with a ``scheduling``
    reason change no number.

    Attributes:
        grid_size: k of each transform's ``grid(k)``.
        grid_side: the side (px) of the images measured, to scale the grids given in pixels for 224-px images
            (translation, blur σ, deform σ: multiplied by grid_side / 224; at 32 px translation ±16 px would move
            the object out and blur σ = 20 erase it). None: the grids as given. Not with ``protocol='ericsson'``,
            which follows the published grids.
        batch_size: images per batch.
        forward_batch: images x parameters per model call (bounds memory whatever N and k).
        n_images: the first n images of the data (None: all); under ``protocol='ericsson'`` the number
            of images drawn with replacement.
        device: 'cpu', 'cuda', 'cuda:N' or None (CUDA when available).
        dtype: model precision: None / 'float32', 'bfloat16' or 'float16' (autocast; features are scored
            in float32). A ``torch.dtype`` is accepted and stored by name.
        channels_last: model input memory format (None: on for CUDA).
        crop: centre crop in pixels after the transform, before the model.
        normalize: ImageNet mean/std normalisation before the model.
        checkpoint: weights loaded into the model (the weights themselves are fingerprinted).
        shrinkage, eps: covariance shrinkage of the reference statistics (None: the protocol's).
        pair_scores_dir: write every per-pair score to ``<dir>/<transform>.{distance,cosine}.npy``.
        state_path: resumable partial state (one file per rank).
        save_every: seconds between state saves.
        strict: stop at the first unreadable image file instead of counting and skipping it.
        resize: folder images: shorter side resized to this, centre-cropped square.
        progress: show a progress bar.
        name: the model's label in tables (default: its name or class).
        feature_cache_mb: memory for cached reference features of this rank's images.
        fingerprint_content: recognise the files of a resumed run by their bytes rather than size + mtime.
        protocol: 'invfast', 'ericsson' or a :class:`~invfast.measure.protocol.Protocol`.
        protocol_seed: seed of the protocol's draws (images with replacement, elastic randomness).
        workers: image-folder decoding processes (None: ``default_workers()``; 0: in this process).
        pair_block: real-world mode: rows of the pairs block scored at once.
        layers: the layers measured, all from one forward pass per view: None (what the model returns),
            'all' (every stage: ResNet ``layer1..layer4``), or module paths ('layer2,layer4', 'output');
            see :mod:`invfast.measure.layers`.
        units: what a unit of a layer is for the per-unit measures (normalized variance, variance ratio;
            :mod:`invfast.measure.units`): 'channels' (each channel after global average pooling, the
            features the whitened scores use) or 'elements' (every C x H x W activation, as tmeasures
            measures by default; streamed: memory O((views + images per batch) x C x H x W), not O(N)).
        equivariance: also fit, per transform, parameter and layer, the cross-validated linear map from the
            image's features to its view's (:func:`invfast.measure.equivariance.linear_equivariance`: R², 1 =
            the transform acts on the features as a linear map); streamed from per-fold sums of
            ``5 x P x D x D`` float64 per layer (P grid parameters, D channels).
        equivariance_mb: the most memory those sums may take per transform (all layers together), in MiB;
            a run that needs more stops before scoring with one error saying how much it needs.
        overlap: make the next chunk's transformed views on a background thread while the model runs on
            the current one (None: on the CPU where a core is left over by torch's threads; CUDA launches
            are asynchronous already).
        split_forward: on the CPU, run each model call as sub-batches of
            :meth:`~invfast.measure.extractor.FeatureExtractor.images_per_call` images (the most whose largest
            activation fits 8 MiB, measured once on one image; no more than the call's images / threads), which
            torch's threads take in turn, each at one intra-op thread, instead of one call whose every op splits
            over the threads (None: on, the CPU only). No op waits for the others' threads, so a thread the OS takes
            away for a while delays only its own share, and each call's activations stay in the cache (faster on
            ResNet-50 at 224 px: docs/performance.md, *Third step*). A model whose kernels pick another
            algorithm for another batch size can differ in the last bits from one whole-batch call. Turn it off
            for a model whose ``forward`` is not safe to call from two threads at once (one that keeps state
            between calls): then each chunk of ``forward_batch`` images is one call.
    """

    grid_size: int = declare(256, at_least=1, group="statistics")
    grid_side: int | None = declare(
        None,
        at_least=1,
        optional=True,
        group="statistics",
        option="scale the pixel grids (translation, blur σ, deform σ, given for 224-px images) to images of this "
        "side (e.g. 32 for 32-px images; default: as given)",
    )
    batch_size: int = declare(
        32,
        at_least=1,
        scheduling="images per batch: the per-image scores do not depend on it",
        group="execution",
        option="images per batch",
    )
    forward_batch: int = declare(
        256,
        at_least=1,
        scheduling="images per model call: bounds memory only",
        group="execution",
        option="images x parameters per model call",
    )
    n_images: int | None = declare(None, at_least=1, optional=True, group="loading")
    device: str | None = declare(
        None, scheduling="the device it resolves to is fingerprinted instead", group="execution"
    )
    dtype: Any = declare(None, group="execution")
    channels_last: bool | None = declare(None, flag=True, optional=True, group="execution")
    crop: int | None = declare(
        None,
        at_least=1,
        optional=True,
        group="loading",
        option="centre crop after the transform, before the model, e.g. 224 (default none; a library model's input "
        "size on folder images)",
    )
    normalize: bool = declare(True, flag=True, group="loading")
    checkpoint: str | None = declare(
        None, scheduling="the weights it loads are fingerprinted themselves", group="loading"
    )
    shrinkage: str | float | None = declare(None, group="statistics")
    eps: float = declare(1e-6, number=True, group="statistics", option="ε of the trace shrinkage")
    pair_scores_dir: str | None = declare(None, group="output")
    state_path: str | None = declare(None, scheduling="where the fingerprint is kept", group="output")
    save_every: float = declare(
        60.0,
        number=True,
        scheduling="how often the state is saved",
        group="output",
        option="seconds between partial-state saves",
    )
    strict: bool = declare(False, flag=True, group="loading", option="stop at the first unreadable image file")
    resize: int = declare(256, at_least=1, group="loading")
    progress: bool = declare(False, flag=True, scheduling="display only", group="output")
    name: str | None = declare(None, scheduling="a label in tables", group="output")
    feature_cache_mb: float = declare(
        512.0,
        number=True,
        scheduling="a memory budget: cached and recomputed features are equal",
        group="execution",
        option="memory (MiB) for the reference images' features kept between transforms (0: recompute them for "
        "each transform; the numbers are the same)",
    )
    fingerprint_content: bool = declare(False, flag=True, group="loading")
    protocol: Any = declare("invfast", group="loading")
    protocol_seed: int = declare(0, at_least=0, group="loading")
    workers: int | None = declare(
        None,
        at_least=0,
        optional=True,
        scheduling="decoding processes: the images they decode are the same",
        group="loading",
        option="image-folder decoding worker processes, decoding ahead of the measurement "
        "(default min(8, usable CPUs); 0: decode in the measuring process)",
    )
    pair_block: int = declare(
        64, at_least=1, scheduling="real-world mode: rows scored at once, a memory bound", group="execution"
    )
    layers: tuple[str, ...] | None = declare(
        None,
        group="statistics",
        option="measure these layers from one forward pass per view: 'all' (every ResNet stage layer1..layer4), or "
        "comma-separated names (torchvision-style layer1..layer4, stem, any model.named_modules() path, 'output'); "
        "default: what the model returns",
    )
    units: str = declare(
        "channels",
        choices=UNITS,
        group="statistics",
        option="the units of the per-unit measures (normalized variance, variance ratio): channels (each channel "
        "after global average pooling) or elements (every C x H x W activation, as tmeasures)",
    )
    equivariance: bool = declare(
        False,
        flag=True,
        group="statistics",
        option="also fit the cross-validated linear map from each image's features to its view's, per grid "
        "parameter and layer (R², 1 = the transform acts linearly on the features; docs/measure.md)",
    )
    equivariance_mb: float = declare(
        2048.0,
        number=True,
        scheduling="a memory limit: a run over it stops, the numbers never change",
        group="execution",
        option="the most memory (MiB) the equivariance fit's per-fold sums may take per transform",
    )
    overlap: bool | None = declare(
        None,
        flag=True,
        optional=True,
        scheduling="how work is scheduled: the views and scores are the same",
        group="execution",
    )
    split_forward: bool | None = declare(
        None,
        flag=True,
        optional=True,
        scheduling="how each model call is scheduled: each image meets the same model",
        group="execution",
    )

    field_word = "measurement option"

    def validate(self) -> None:
        object.__setattr__(self, "dtype", _dtype_name(self.dtype))
        self._check_device()
        self._check_statistics()
        self._check_paths_and_names()

    def _check_device(self) -> None:
        """``device`` stored as torch spells it ('cuda' -> 'cuda', torch.device('cpu') -> 'cpu')."""
        if self.device is None:
            return
        if not isinstance(self.device, (str, torch.device)):
            raise TypeError(f"device must be a string like 'cpu' or 'cuda:0' (or None), got {self.device!r}")
        try:
            object.__setattr__(self, "device", str(torch.device(self.device)))
        except RuntimeError as e:
            raise ValueError(f"device {self.device!r} is not a device name like 'cpu', 'cuda' or 'cuda:0'") from e

    def _check_statistics(self) -> None:
        """Shrinkage and protocol."""
        if self.shrinkage is not None:
            ok = self.shrinkage in ("trace", "ledoit-wolf", "none") or (
                isinstance(self.shrinkage, (int, float))
                and not isinstance(self.shrinkage, bool)
                and self.shrinkage >= 0
            )
            if not ok:
                raise ValueError(
                    f"shrinkage must be 'trace', 'ledoit-wolf', 'none', a number >= 0 or None (the "
                    f"protocol's), got {self.shrinkage!r}"
                )
        from invfast.measure.protocol import PROTOCOLS, Protocol

        if not isinstance(self.protocol, Protocol) and self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)} (or a Protocol), got {self.protocol!r}")
        published = self.protocol.name if isinstance(self.protocol, Protocol) else self.protocol
        if self.grid_side is not None and published == "ericsson":
            raise ValueError(
                "grid_side scales the grids to the image, but protocol='ericsson' follows the published grids: "
                "leave grid_side unset under that protocol"
            )

    def _check_paths_and_names(self) -> None:
        """Paths (stored as str), layers (a tuple of module paths) and the table label."""
        for k in ("checkpoint", "pair_scores_dir", "state_path"):
            v = getattr(self, k)
            if v is not None:
                if not isinstance(v, (str, os.PathLike)):
                    raise TypeError(f"{k} must be a path (str or os.PathLike) or None, got {type(v).__name__}")
                object.__setattr__(self, k, os.fspath(v))
        if self.layers is not None:
            items = self.layers.split(",") if isinstance(self.layers, str) else list(self.layers)
            if not all(isinstance(v, str) for v in items):
                raise TypeError(
                    f"layers must be a string like 'layer1,layer4' or a sequence of names, got {self.layers!r}"
                )
            items = [v.strip() for v in items if v.strip()]
            if not items:
                raise ValueError("layers is empty; give 'all', module paths like 'layer1,layer4', or None")
            object.__setattr__(self, "layers", tuple(items))
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"name must be a string or None, got {type(self.name).__name__}")

    # ------------------------------------------------------------------------------------------ derived
    @property
    def torch_dtype(self) -> torch.dtype | None:
        """The autocast dtype (None for float32)."""
        return DTYPES[self.dtype] if self.dtype is not None else None

    @classmethod
    def build(cls, config: MeasureConfig | None = None, **overrides: Any) -> MeasureConfig:
        """``config`` (default: all defaults) with ``overrides`` applied: how the public functions merge
        a config with keyword arguments."""
        if config is not None and not isinstance(config, MeasureConfig):
            raise TypeError(f"config must be an invfast.measure.MeasureConfig, got {type(config).__name__}")
        base = config or cls()
        return base.replace(**overrides) if overrides else base

    def to_dict(self) -> dict[str, Any]:
        """Every field (JSON-able): what ``result.json`` records as ``meta['config']``."""
        return dataclasses.asdict(self)


def _dtype_name(dtype: Any) -> str | None:
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        for k, v in DTYPES.items():
            if v == dtype or (v is None and dtype == torch.float32):
                return None if k == "float32" else k
        raise ValueError(f"dtype must be None, torch.float32, torch.bfloat16 or torch.float16, got {dtype}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)} (or a torch dtype of those), got {dtype!r}")
    return None if dtype == "float32" else dtype


def fingerprint(config: MeasureConfig, device: torch.device, **inputs: Any) -> dict[str, Any]:
    """What a resumed run must share with the run that saved its state: every fingerprinted field of
    ``config`` (paths made absolute), the resolved ``device``, the invfast version and the run's
    ``inputs`` (data description, model weights checksum, transforms and grid sizes, given stats, ...)."""
    from invfast import __version__

    fields = config.numbers()
    if fields.get("pair_scores_dir") is not None:
        fields["pair_scores_dir"] = os.path.abspath(fields["pair_scores_dir"])
    return {"config": fields, "device": str(device), "invfast": __version__, **inputs}
