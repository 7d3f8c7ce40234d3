"""The dispatch table: for every compiled op and device type, is a compiled kernel available here, does
backend ``auto`` take it, and why.

* ``available`` is read from the loaded core at run time: the op is registered and has a kernel for the
  device's dispatch key (CUDA kernels only in a core built with CUDA).
* ``default`` and ``evidence`` are this module's static knowledge (:data:`KNOWN`): a compiled kernel is the
  ``auto`` choice on a device only where a benchmark measured it faster than the op's torch reference
  there; the evidence names that benchmark, its ratio, the machine and the date, or says why the entry
  is off. ``benchmarks/bench_ops.py`` times every op against its reference on every device present.
* ``when`` is a row's input condition (:class:`Condition`): the kernel serves a call only where it holds —
  in every mode for what the kernel cannot do (a backward), under ``auto`` only for an input class where the
  reference was measured faster (pixel-copy warps). :func:`serves` applies it; no caller decides on its own.
* ``INVFAST_CUDA_KERNELS`` (``1``/``all``, or a comma list of families or op names) opts CUDA entries in
  for ``auto`` before they are measured.

Device types other than ``cpu`` and ``cuda`` (mps, meta, xpu, ...) have no compiled kernels: their
entries say so and every op runs its torch reference there.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from invfast import _loader

DEVICES = ("cpu", "cuda")
MODES = ("auto", "compiled", "reference")

#: environment switch that lets CUDA kernels serve under ``auto`` before they are measured faster
CUDA_KERNELS_ENV = "INVFAST_CUDA_KERNELS"


@dataclass(frozen=True)
class Condition:
    """An input condition of a table row: the kernel serves a call with ``args`` only where ``test(*args)``
    holds, under the backend ``modes`` listed (elsewhere the condition does not apply)."""

    text: str
    test: Callable[..., bool]
    modes: tuple[str, ...] = ("auto", "compiled")

    def blocks(self, mode: str, args: tuple) -> bool:
        """Whether the condition sends a call with ``args`` under ``mode`` to the torch reference."""
        return mode in self.modes and not self.test(*args)


def _no_grad(*args: Any) -> bool:
    return not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def _not_pixel_copies(*args: Any) -> bool:
    """(images, matrix, ...): some map is not integral, or the call is being compiled (the kernel serves integral
    maps there too: the same pixels, no data-dependent branch); without a matrix, true."""
    from invfast._validate import compiling

    matrix = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else None
    return matrix is None or compiling() or not bool((matrix == torch.round(matrix)).all())


#: the kernel has no backward: inputs that require grad take the reference in every mode
NO_GRAD = Condition("no input requires grad (the kernel has no backward)", _no_grad)
#: integral maps (flips, 90-degree rotations, integer shifts) are pixel copies: the exact torch gather was
#: measured faster for them than the sampling kernel
NOT_PIXEL_COPIES = Condition(
    "auto: the maps are not all integral (pixel copies take the exact torch gather, measured faster)",
    _not_pixel_copies,
    modes=("auto",),
)


@dataclass(frozen=True)
class Knowledge:
    """What is known about one (op, device) kernel, independent of this installation."""

    family: str
    default: bool
    evidence: str
    when: Condition | None = None


@dataclass(frozen=True)
class Entry:
    """One row of the table for this installation and environment."""

    op: str
    device: str
    family: str
    available: bool  # a compiled kernel for this device is in the loaded core
    default: bool  # measured faster than the torch reference on this device: auto takes it
    opted_in: bool  # INVFAST_CUDA_KERNELS names this op or its family (CUDA only)
    evidence: str
    when: str = ""  # the input condition under which the kernel serves a call ('' : every call)

    @property
    def auto(self) -> bool:
        """Whether backend ``auto`` runs the compiled kernel for inputs on this device."""
        return self.available and (self.default or self.opted_in)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "auto": self.auto}


_CUDA_UNMEASURED = (
    "off: never run on a GPU (none was available to this project), so not measured faster; "
    "compiled by nvcc only (tests/test_cuda_syntax.py); measure with benchmarks/bench_ops.py on a GPU"
)
_NO_CUDA_SYNTH = "off: no CUDA kernel (csrc/synth has CPU kernels only); the torch reference runs on the GPU"

_CPU_RUN = "two runs, AMD EPYC, 2 cores shared with other jobs (load 5 and 11), 1 thread, torch 2.13 CPU, 2026-11-25"


def _cpu(op: str, ratio: str, regime: str, more: str = "") -> str:
    """Evidence text of a CPU entry measured by benchmarks/bench_ops.py."""
    return (
        f"benchmarks/bench_ops.py::test_op_vs_reference[{op}-cpu]: reference/kernel {ratio} ({regime}; "
        f"{_CPU_RUN}){more}"
    )


# fmt: off
KNOWN: dict[tuple[str, str], Knowledge] = {
    ("pair_scores", "cpu"): Knowledge("invariance", True, _cpu(
        "pair_scores", "28.7-38.7x", "N=200 P=64 D=512 float32")),
    ("sqdist_logsumexp", "cpu"): Knowledge("invariance", True, _cpu(
        "sqdist_logsumexp", "2.67-3.25x", "512 rows x 4000, D=128"), NO_GRAD),
    ("pairwise_logsumexp", "cpu"): Knowledge("invariance", True, _cpu(
        "pairwise_logsumexp", "3.48-3.86x", "N=2000 float32, D=128, 256-row blocks; load 7-9",
        "; benchmarks/bench_invariance.py::test_uniformity_vs_pdist_2000: 2.57-2.81x torch.pdist, 1 thread, load "
        "3-11, 2026-11-25 (docs/performance.md)"), NO_GRAD),
    ("knn_sqdist", "cpu"): Knowledge("invariance", True, _cpu(
        "knn_sqdist", "19.1x", "4000 float32 rows, D=128, k=10, against the exact float64 reference; load 7",
        "; benchmarks/bench_invariance.py::test_acr_vs_cdist_topk: 0.85-1.07x the float32 cdist + topk ACR used "
        "before (which is not exact), load 3-5, 2026-11-25 (docs/performance.md)")),
    ("merge_unit_moments_", "cpu"): Knowledge("invariance", True, (
        "benchmarks/bench_ops.py::test_op_vs_reference[merge_unit_moments_-cpu]: reference/kernel 17.8x (16 images "
        "x 16 views x 16384 float32 units; one run, AMD EPYC, 2 cores, load 0.8, 1 thread, torch 2.13 CPU, "
        "2026-11-28); the per-layer measurement with units='elements' (issue 42, docs/performance.md)")),
    ("hyper_generate", "cpu"): Knowledge("hyper", True, _cpu(
        "hyper_generate", "1.47-2.15x", "B=8, 20 kernels, 1.8M rows, H=32",
        "; benchmarks/bench_hyper.py::TestCPUGenerate: 1.25x (B=1) / 1.30x (B=8) the per-kernel loop, "
        "Hyper-ResNet-50 width 64, Xeon AVX-512 idle, 2026-11-23 (docs/models.md)")),
    ("hyper_generate_backward", "cpu"): Knowledge("hyper", True, _cpu(
        "hyper_generate_backward", "1.33-1.35x", "B=8, 1.8M rows, H=32",
        "; called by hyper_generate's compiled backward")),
    ("synth_color", "cpu"): Knowledge("synth", True, _cpu("synth_color", "4.44-5.72x", "B=512 RGBA 32 px, all flags")),
    ("synth_blur", "cpu"): Knowledge("synth", True, _cpu("synth_blur", "2.91-5.97x", "B=512 RGBA 32 px, 7 taps")),
    ("synth_warp", "cpu"): Knowledge("synth", False, "off: measured slower than the reference: " + _cpu(
        "synth_warp", "0.43-0.65x", "B=512 RGBA 32 px; 0.55-0.66x at B=64 and unpremultiplied")),
    ("synth_composite", "cpu"): Knowledge("synth", True, _cpu(
        "synth_composite", "2.11-2.49x", "B=512 32 px",
        "; benchmarks/bench_synthetic.py::test_composite_compiled_vs_torch: 5.3x / 6.2x, 2 000 images, load "
        "10 / 7, 2026-11-21 (docs/synthetic.md)")),
    ("warp_affine", "cpu"): Knowledge("augment", True, _cpu(
        "warp_affine", "2.12-2.46x", "B=16 uint8 96 px, P=32 rotations; 1.22x float32",
        "; benchmarks/bench_transforms.py::test_compiled_warp_vs_torch_path: 2.6-2.9x, B=64, 2026-11-21 "
        "(docs/transforms.md)"), NOT_PIXEL_COPIES),
    ("warp_coords", "cpu"): Knowledge("augment", True, _cpu(
        "warp_coords", "1.62-1.88x", "B=16 uint8 96 px, P=8 smooth fields; 1.50x float32 224 px, P=8",
        "; an earlier run recorded 0.98x (docs/transforms.md, float32 224 px)")),
    ("augment_views", "cpu"): Knowledge("augment", True, _cpu(
        "augment_views", "7.31x", "Default-policy stages, B=16 uint8 160 px -> 128 px; load 7 (planes per image, "
        "separable crop warp, vectorised colour and blur passes)",
        "; the Policy runs it on CPU: benchmarks/bench_policies.py, 1 thread, B=64, load 6-7, 2026-11-25: "
        "Default two views 3.38x its torch-ops path and 4.49-4.59x kornia at 224 px, 5.70-9.06x at 32 px; Spatial "
        "7.89x (docs/performance.md)")),
}
_TT_RUN = ("one run, AMD EPYC, 2 cores shared with other jobs (load 7.5 falling to 5.7), 1 thread, torch 2.13 CPU, "
           "2026-11-25")
_TT_REGIME = "B=16 uint8 224 px, P=16"
for _op, _ratio, _what in (("lut_u8", "2.17x", "brightness-like tables"), ("histogram_u8", "17.9x", "level counts"),
                           ("blend_u8", "4.76x", "saturation factors"), ("hue_u8", "13.0x", "hue shifts"),
                           ("blur_u8", "32.9x", "blur grid, sigma 0..20 px"),
                           ("warp_affine_u8", "4.73x", "fractional rotations")):
    KNOWN[(_op, "cpu")] = Knowledge("transforms", True, (
        f"benchmarks/bench_ops.py::test_op_vs_reference[{_op}-cpu]: reference/kernel {_ratio} ({_TT_REGIME} {_what}; "
        f"{_TT_RUN}); the test transforms' uint8 path (issue 29, docs/transforms.md)"))
    KNOWN[(_op, "cuda")] = Knowledge("transforms", False, "off: no CUDA kernel (csrc/transforms has CPU kernels only); "
                                     "the torch reference runs on the GPU")
for _op in ("pairwise_logsumexp", "knn_sqdist"):
    KNOWN[(_op, "cuda")] = Knowledge("invariance", False, "off: no CUDA kernel (csrc/invariance/pairwise_cpu.cpp "
                                     "is CPU only); the torch reference runs on the GPU")
KNOWN[("merge_unit_moments_", "cuda")] = Knowledge(
    "invariance", False, "off: no CUDA kernel (csrc/invariance/units_cpu.cpp is CPU only); the torch reference runs "
    "on the GPU")
for _op in ("pair_scores", "sqdist_logsumexp"):  # the CUDA default before this table, though never measured
    KNOWN[(_op, "cuda")] = Knowledge("invariance", False, _CUDA_UNMEASURED + "; was the CUDA default before the "
                                     "dispatch table without a measurement, turned off for that reason",
                                     NO_GRAD if _op == "sqdist_logsumexp" else None)
for _op, _family in (("hyper_generate", "hyper"), ("hyper_generate_backward", "hyper"), ("warp_affine", "augment"),
                     ("warp_coords", "augment"), ("augment_views", "augment")):
    KNOWN[(_op, "cuda")] = Knowledge(_family, False, _CUDA_UNMEASURED)
for _op in ("synth_color", "synth_blur", "synth_warp", "synth_composite"):
    KNOWN[(_op, "cuda")] = Knowledge("synth", False, _NO_CUDA_SYNTH)
# fmt: on

OP_FAMILIES: dict[str, str] = {op: k.family for (op, _), k in KNOWN.items()}

_available_cache: dict[tuple[str, str], bool] = {}


@torch.compiler.assume_constant_result  # fixed for the process: torch.compile takes it as a constant
def kernel_available(op: str, device_type: str) -> bool:
    """Whether the loaded core has a compiled ``op`` kernel for ``device_type`` ('cpu', 'cuda', ...)."""
    key = (op, device_type)
    if key not in _available_cache:
        _available_cache[key] = _probe(op, device_type)
    return _available_cache[key]


def _probe(op: str, device_type: str) -> bool:
    mod = _loader.load()
    if mod is None or device_type not in DEVICES:
        return False
    if device_type == "cuda" and not mod.built_with_cuda():
        return False
    import torch

    try:
        packet = getattr(torch.ops.invfast, op)
    except (AttributeError, RuntimeError):
        return False
    return bool(packet.default.has_kernel_for_dispatch_key("CUDA" if device_type == "cuda" else "CPU"))


def cuda_opt_in() -> set[str]:
    """The families and op names ``INVFAST_CUDA_KERNELS`` opts in (``{'*'}`` for all); read at each call."""
    raw = os.environ.get(CUDA_KERNELS_ENV, "").strip().lower()
    if raw in ("", "0", "none"):
        return set()
    if raw in ("1", "all"):
        return {"*"}
    return {s.strip() for s in raw.split(",") if s.strip()}


def cuda_env_problem() -> str | None:
    """One line describing an ``INVFAST_CUDA_KERNELS`` that names no known family or op, or None when it is
    valid (empty, 0, none, 1, all, or a comma list of families and op names)."""
    names = cuda_opt_in() - {"*"}
    known = set(OP_FAMILIES) | set(OP_FAMILIES.values())
    unknown = sorted(names - known)
    if not unknown:
        return None
    raw = os.environ.get(CUDA_KERNELS_ENV, "")
    return (
        f"{CUDA_KERNELS_ENV}={raw!r} names no kernel family or op ({', '.join(unknown)}); valid values: 1 or all, "
        f"0 or none, or a comma list of families ({', '.join(sorted(set(OP_FAMILIES.values())))}) and op names "
        "(invfast info lists them)"
    )


def entry(op: str, device_type: str) -> Entry:
    """The table row of ``op`` on ``device_type`` (any device type; unknown ones have no kernel)."""
    family = OP_FAMILIES.get(op, "-")
    if device_type not in DEVICES:
        return Entry(
            op,
            device_type,
            family,
            False,
            False,
            False,
            f"off: invfast has no compiled kernels for device type {device_type!r}",
        )
    known = KNOWN.get((op, device_type))
    if known is None:
        known = Knowledge(family, False, "off: no entry in the dispatch table (invfast/dispatch.py KNOWN)")
    opted = False
    if device_type == "cuda":
        names = cuda_opt_in()
        opted = bool(names & {"*", op, family})
    when = known.when.text if known.when is not None else ""
    return Entry(op, device_type, family, kernel_available(op, device_type), known.default, opted, known.evidence, when)


def serves(op: str, device_type: str, mode: str, args: tuple) -> bool:
    """Whether the row of ``op`` on ``device_type`` lets its kernel serve a call with ``args`` under ``mode``
    (its input condition, :attr:`Knowledge.when`; a row without one serves every call)."""
    known = KNOWN.get((op, device_type))
    return known is None or known.when is None or not known.when.blocks(mode, args)


def registered_ops() -> list[str]:
    """Names of the ops the loaded compiled core registers under ``torch.ops.invfast`` (empty without it)."""
    if _loader.load() is None:
        return []
    import torch

    return sorted(
        {n.split("::", 1)[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith("invfast::")}
    )


def ops() -> list[str]:
    """Every op the table knows or the loaded core registers."""
    return sorted({op for op, _ in KNOWN} | set(registered_ops()))


def table() -> list[Entry]:
    """Every (op, device) row, ops sorted, devices in :data:`DEVICES` order."""
    return [entry(op, dev) for op in ops() for dev in DEVICES]


def use_kernel(op: str, device_type: str, mode: str) -> bool:
    """Whether ``op`` on ``device_type`` runs its compiled kernel under backend ``mode``.

    'reference': never. 'auto': where the table says so (:attr:`Entry.auto`). 'compiled': always, and a
    RuntimeError naming the op, the device and the way out where there is no kernel for that device."""
    if mode == "reference":
        return False
    e = entry(op, device_type)
    if mode == "auto":
        return e.auto
    if not e.available:
        raise RuntimeError(_missing_kernel_message(e))
    return True


def _missing_kernel_message(e: Entry) -> str:
    core = _loader.load()
    if core is None:
        why = (
            "the compiled core is not built (build it with `pip install --no-build-isolation -e .` from the "
            "repository root)"
        )
    elif e.device == "cuda" and not core.built_with_cuda():
        why = "the compiled core was built without CUDA (rebuild it against a CUDA build of torch)"
    else:
        why = f"no {e.op} kernel exists for {e.device}"
    return (
        f"backend 'compiled' is forced but invfast op {e.op!r} has no compiled kernel for device {e.device!r}: "
        f"{why}; use invfast.backend.use('auto') (or INVFAST_BACKEND=auto) to run the torch reference there"
    )


def format_table(entries: list[Entry] | None = None, width: int = 120) -> str:
    """The table as aligned text, one row per (op, device): op, device, family, kernel available, default
    (measured faster), auto (what ``auto`` runs; 'kernel when' under the row's input condition), evidence and
    condition (wrapped to ``width`` columns)."""
    rows = [
        (
            e.op,
            e.device,
            e.family,
            _yn(e.available),
            _yn(e.default) + (" +opt-in" if e.opted_in else ""),
            ("kernel when " if e.when else "kernel") if e.auto else "torch",
            e.evidence + (f"; the kernel serves only where {e.when}" if e.when else ""),
        )
        for e in (table() if entries is None else entries)
    ]
    head = ("op", "device", "family", "kernel", "default", "auto", "evidence")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(6)]
    indent = sum(widths) + 2 * len(widths)
    lines = []
    for r in [head, *rows]:
        left = "  ".join(c.ljust(w) for c, w in zip(r[:6], widths)) + "  "
        wrapped = textwrap.wrap(r[6], max(40, width - indent)) or [""]
        lines.append(left + wrapped[0])
        lines.extend(" " * indent + w for w in wrapped[1:])
    return "\n".join(line.rstrip() for line in lines)


def _yn(v: bool) -> str:
    return "yes" if v else "no"
