"""Checks of :class:`~invfast.reproduce.config.ReproduceConfig` fields that need other packages (the
test transforms' registry, the model registry) or concern one experiment (Speicher et al.'s)."""

from __future__ import annotations

from typing import Any

__all__ = ["validate_test_transforms", "validate_speicher", "base_images_source"]


def base_images_source(spec: str) -> str | None:
    """The folder of a ``speicher.base_images`` value ('folder:PATH' -> PATH; 'builtin' -> None); ValueError
    otherwise."""
    if spec == "builtin":
        return None
    head, _, path = str(spec).partition(":")
    if head == "folder" and path:
        return path
    raise ValueError(
        f"speicher.base_images must be 'builtin' or 'folder:PATH' (an ImageFolder: PATH/<class>/<image>), got {spec!r}"
    )


def validate_test_transforms(cfg: Any) -> None:
    """``measurement.transforms`` names known transforms (one ValueError naming the others). Whether the selected
    findings have the families they compare is checked when a run starts
    (:func:`invfast.reproduce.findings.check_families`)."""
    from invfast.measure.selection import resolve_transforms

    resolve_transforms(cfg.measurement.transforms)


def validate_speicher(cfg: Any, architectures: tuple[str, ...]) -> None:
    """The fields of Speicher et al.'s experiments (S1-S8): ``cfg.speicher``, against the batch size."""
    s, batch = cfg.speicher, cfg.pretrain.batch_size
    k = s.transfer_transforms
    nested = s.nested_sizes
    if not nested or list(nested) != sorted(set(nested)):
        raise ValueError(f"speicher.nested_sizes must be strictly increasing, got {nested}")
    if nested[0] < 1 or nested[-1] > 2 * k:
        raise ValueError(
            f"speicher.nested_sizes must lie in 1..{2 * k} (2 x speicher.transfer_transforms types in all), "
            f"got {nested}"
        )
    if len(nested) < 2:
        raise ValueError(f"speicher.nested_sizes needs at least two nested sets, got {nested}")
    if len(s.s1_sizes) < 2 or not all(0 < v <= 1 for v in s.s1_sizes) or len(set(s.s1_sizes)) < len(s.s1_sizes):
        raise ValueError(
            f"speicher.s1_sizes must be two or more distinct fractions of speicher.transfer_n_source in (0, 1], "
            f"got {s.s1_sizes}"
        )
    if min(s.s1_sizes) * s.transfer_n_source < batch:
        raise ValueError(
            f"speicher.s1_sizes: the smallest ({min(s.s1_sizes)} x {s.transfer_n_source} images) is under a batch "
            f"({batch})"
        )
    bad = [a for a in s.s1_archs if a not in architectures or a.startswith(("hyper-", "prompt"))]
    if bad or len(s.s1_archs) < 2 or len(set(s.s1_archs)) < len(s.s1_archs):
        raise ValueError(
            f"speicher.s1_archs must be two or more distinct plain architectures of invfast.models, got {s.s1_archs}"
        )
    if not 1 <= s.s5_objects <= s.transfer_objects:
        raise ValueError(
            f"speicher.s5_objects must be in 1..speicher.transfer_objects ({s.transfer_objects}), got {s.s5_objects}"
        )
    for name, v in (("alphas", s.alphas), ("betas", s.betas)):
        if len(v) < 2 or not all(0.0 <= x <= 1.0 for x in v) or list(v) != sorted(set(v)):
            raise ValueError(f"speicher.{name} must be two or more increasing values in [0, 1], got {v}")
    if s.betas[0] != 0.0:
        raise ValueError(
            f"speicher.betas must start at 0 (S4 compares availability 0 with the first value above), got {s.betas}"
        )
    base_images_source(s.base_images)
    _validate_categories(s.categories)
    if 2 * s.category_objects > 61:
        raise ValueError(
            f"speicher.category_objects must be <= 30 (and as many others for mild OOD), got {s.category_objects}"
        )
    if s.category_n < batch or s.irrelevant_n < batch:
        raise ValueError(f"speicher.category_n and speicher.irrelevant_n must hold at least one batch ({batch})")
    if s.sensitivity_n < 2:
        raise ValueError(f"speicher.sensitivity_n must be >= 2, got {s.sensitivity_n}")
    c = s.category_sensitivity_n
    if isinstance(c, bool) or not isinstance(c, int) or c == 1 or c < 0:
        raise ValueError(f"speicher.category_sensitivity_n must be 0 (as speicher.sensitivity_n) or >= 2, got {c}")


def _validate_categories(categories: tuple[str, ...]) -> None:
    """S6 / S7's categories: two or more distinct '+'-joined Transforms-2D types."""
    from invfast.synthetic import TRANSFORMATION_TYPES

    for c in categories:
        bad = [t for t in c.split("+") if t not in TRANSFORMATION_TYPES]
        if bad or not c:
            raise ValueError(
                f"speicher.categories: {c!r} is not '+'-joined Transforms-2D types ({', '.join(TRANSFORMATION_TYPES)})"
            )
    if len(categories) < 2 or len(set(categories)) < len(categories):
        raise ValueError(f"speicher.categories must be two or more distinct categories, got {categories}")
