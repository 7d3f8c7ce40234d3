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

import json
import os
import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from invfast import _loader
from invfast._validate import compiling

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
    matrix = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else None
    return matrix is None or compiling() or not bool((matrix == torch.round(matrix)).all())


def _small_descriptor_batch(*args: Any) -> bool:
    """(hidden [B, L, H], ...): B within the measured-faster range of the CUDA weight-generation kernel."""
    hidden = args[0] if args and isinstance(args[0], torch.Tensor) else None
    return hidden is None or hidden.dim() != 3 or hidden.shape[0] <= HYPER_KERNEL_MAX_B


#: the kernel has no backward: inputs that require grad take the reference in every mode
NO_GRAD = Condition("no input requires grad (the kernel has no backward)", _no_grad)
#: integral maps (flips, 90-degree rotations, integer shifts) are pixel copies: the exact torch gather was
#: measured faster for them than the sampling kernel
NOT_PIXEL_COPIES = Condition(
    "auto: the maps are not all integral (pixel copies take the exact torch gather, measured faster)",
    _not_pixel_copies,
    modes=("auto",),
)


#: Hyper-ResNet weight generation on CUDA: the kernel was measured faster than the torch reference at B <= 8
#: descriptors (2.2-4.6x) and slower at B = 64 (0.71-0.75x, H200): larger batches take the reference
HYPER_KERNEL_MAX_B = 8
SMALL_DESCRIPTOR_BATCH = Condition(
    f"auto: at most {HYPER_KERNEL_MAX_B} descriptors (hidden [B, L, H] with B <= {HYPER_KERNEL_MAX_B}; measured slower "
    "at B = 64 on an H200)",
    _small_descriptor_batch,
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


_NO_CUDA_SYNTH = "off: no CUDA kernel (csrc/synth has CPU kernels only); the torch reference runs on the GPU"

#: the measured evidence of the CPU rows, written by benchmarks/bench_ops.py (see the file's "about")
EVIDENCE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dispatch_evidence.json")


def _load_evidence() -> dict[str, dict[str, Any]]:
    with open(EVIDENCE_FILE, encoding="utf-8") as f:
        return json.load(f)["evidence"]


_EVIDENCE = _load_evidence()


def record_measurement(path: str, op: str, device: str, ratio: float, regime: str, threads: int = 1) -> dict[str, Any]:
    """Replace the evidence record of (op, device) in the evidence file at ``path`` by one benchmark run: the ratio
    reference / kernel, the regime (the inputs) and this run (GPU for cuda, CPU model, cores, load, threads, torch,
    date); notes
    from other benchmarks are kept. Returns the record. The maintainer reviews the diff before committing."""
    import datetime
    import platform

    cpu = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    gpu = f"{torch.cuda.get_device_name()}, " if device == "cuda" and torch.cuda.is_available() else ""
    run = (
        f"one run, {gpu}{cpu}, {os.cpu_count()} cores, load {load:.1f}, {threads} thread{'s' if threads != 1 else ''}, "
        f"torch {torch.__version__}, {datetime.date.today().isoformat()}"
    )
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    old = doc["evidence"].get(f"{op}/{device}", {})
    rec = {"ratio": [f"{ratio:.2f}"], "regime": regime, "run": run}
    if old.get("notes"):
        rec["notes"] = old["notes"]
    doc["evidence"][f"{op}/{device}"] = rec
    doc["evidence"] = dict(sorted(doc["evidence"].items()))
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)
    return rec


def measured(op: str, device: str) -> str:
    """The evidence text of a measured row: its benchmark, the ratio reference / kernel, the regime and the run
    (from :data:`EVIDENCE_FILE`), then any notes; 'off: measured slower ...' where the ratio is below 1."""
    r = _EVIDENCE[f"{op}/{device}"]
    text = (
        f"benchmarks/bench_ops.py::test_op_vs_reference[{op}-{device}]: reference/kernel {'-'.join(r['ratio'])}x "
        f"({r['regime']}; {r['run']})" + (f"; {r['notes']}" if r.get("notes") else "")
    )
    return text if _measured_faster(op, device) else "off: measured slower than the reference: " + text


def _measured_faster(op: str, device: str) -> bool:
    """Whether every recorded ratio reference / kernel of (op, device) in :data:`EVIDENCE_FILE` is above 1."""
    r = _EVIDENCE.get(f"{op}/{device}")
    return r is not None and min(float(v) for v in r["ratio"]) > 1


# fmt: off
KNOWN: dict[tuple[str, str], Knowledge] = {
    ("pair_scores", "cpu"): Knowledge("invariance", True, measured("pair_scores", "cpu")),
    ("sqdist_logsumexp", "cpu"): Knowledge("invariance", True, measured("sqdist_logsumexp", "cpu"), NO_GRAD),
    ("pairwise_logsumexp", "cpu"): Knowledge("invariance", True, measured("pairwise_logsumexp", "cpu"), NO_GRAD),
    ("knn_sqdist", "cpu"): Knowledge("invariance", True, measured("knn_sqdist", "cpu")),
    ("merge_unit_moments_", "cpu"): Knowledge("invariance", True, measured("merge_unit_moments_", "cpu")),
    ("hyper_generate", "cpu"): Knowledge("hyper", True, measured("hyper_generate", "cpu")),
    ("hyper_generate_backward", "cpu"): Knowledge("hyper", True, measured("hyper_generate_backward", "cpu")),
    ("synth_color", "cpu"): Knowledge("synth", True, measured("synth_color", "cpu")),
    ("synth_blur", "cpu"): Knowledge("synth", True, measured("synth_blur", "cpu")),
    ("synth_warp", "cpu"): Knowledge("synth", False, measured("synth_warp", "cpu")),
    ("synth_composite", "cpu"): Knowledge("synth", True, measured("synth_composite", "cpu")),
    ("warp_affine", "cpu"): Knowledge("augment", True, measured("warp_affine", "cpu"), NOT_PIXEL_COPIES),
    ("warp_coords", "cpu"): Knowledge("augment", True, measured("warp_coords", "cpu")),
    ("augment_views", "cpu"): Knowledge("augment", True, measured("augment_views", "cpu")),
}
for _op in ("lut_u8", "histogram_u8", "blend_u8", "hue_u8", "blur_u8", "warp_affine_u8"):
    KNOWN[(_op, "cpu")] = Knowledge("transforms", True, measured(_op, "cpu"))
    KNOWN[(_op, "cuda")] = Knowledge("transforms", False, "off: no CUDA kernel (csrc/transforms has CPU kernels only); "
                                     "the torch reference runs on the GPU")
KNOWN[("warp_affine_u8", "cuda")] = Knowledge("transforms", False, "off: no CUDA kernel; uint8 images take the general "
                                            "warp_affine there, its CUDA row deciding kernel or reference")
for _op in ("pairwise_logsumexp", "knn_sqdist"):
    KNOWN[(_op, "cuda")] = Knowledge("invariance", False, "off: no CUDA kernel (csrc/invariance/pairwise_cpu.cpp "
                                     "is CPU only); the torch reference runs on the GPU")
KNOWN[("merge_unit_moments_", "cuda")] = Knowledge(
    "invariance", False, "off: no CUDA kernel (csrc/invariance/units_cpu.cpp is CPU only); the torch reference runs "
    "on the GPU")
# CUDA rows: measured on an H200 (benchmarks/bench_ops.py and bench_hyper.py, 2026-12-04; docs/gpu.md)
for _op, _family, _when in (("pair_scores", "invariance", None), ("sqdist_logsumexp", "invariance", NO_GRAD),
                            ("hyper_generate", "hyper", SMALL_DESCRIPTOR_BATCH),
                            ("hyper_generate_backward", "hyper", None), ("warp_affine", "augment", None),
                            ("warp_coords", "augment", None), ("augment_views", "augment", None)):
    KNOWN[(_op, "cuda")] = Knowledge(_family, _measured_faster(_op, "cuda"), measured(_op, "cuda"), _when)
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


def format_table(entries: list[Entry] | None = None, width: int = 120, evidence: bool = True) -> str:
    """The table as aligned text, one row per (op, device): op, device, family, kernel available, default
    (measured faster), auto (what ``auto`` runs; 'kernel when' under the row's input condition) and, with
    ``evidence``, the evidence and condition (wrapped to ``width`` columns)."""
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
    if not evidence:
        rows = [(*r[:6], "") for r in rows]
        head = (*head[:6], "")
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
