"""Checks of :class:`~invfast.reproduce.config.ReproduceConfig` fields that need other packages (the
test transforms' registry, the model registry) or concern one experiment (Speicher et al.'s)."""

from __future__ import annotations

from typing import Any

__all__ = ["validate_test_transforms", "validate_speicher", "base_images_source"]


def base_images_source(spec: str) -> str | None:
    """The folder of a ``base_images`` value ('folder:PATH' -> PATH; 'builtin' -> None); ValueError otherwise."""
    if spec == "builtin":
        return None
    head, _, path = str(spec).partition(":")
    if head == "folder" and path:
        return path
    raise ValueError(
        f"base_images must be 'builtin' or 'folder:PATH' (an ImageFolder: PATH/<class>/<image>), got {spec!r}"
    )


def validate_test_transforms(cfg: Any) -> None:
    """``test_transforms`` names known transforms (one ValueError naming the others). Whether the selected findings
    have the families they compare is checked when a run starts (:func:`invfast.reproduce.findings.check_families`)."""
    from invfast.measure.selection import resolve_transforms

    resolve_transforms(cfg.test_transforms)


def validate_speicher(cfg: Any, architectures: tuple[str, ...]) -> None:
    """The fields of Speicher et al.'s experiments (S1-S8)."""
    k = cfg.transfer_transforms
    if not cfg.nested_sizes or list(cfg.nested_sizes) != sorted(set(cfg.nested_sizes)):
        raise ValueError(f"nested_sizes must be strictly increasing, got {cfg.nested_sizes}")
    if cfg.nested_sizes[0] < 1 or cfg.nested_sizes[-1] > 2 * k:
        raise ValueError(
            f"nested_sizes must lie in 1..{2 * k} (2 x transfer_transforms types in all), got {cfg.nested_sizes}"
        )
    if len(cfg.nested_sizes) < 2:
        raise ValueError(f"nested_sizes needs at least two nested sets, got {cfg.nested_sizes}")
    if len(cfg.s1_sizes) < 2 or not all(0 < v <= 1 for v in cfg.s1_sizes) or len(set(cfg.s1_sizes)) < len(cfg.s1_sizes):
        raise ValueError(
            f"s1_sizes must be two or more distinct fractions of transfer_n_source in (0, 1], got {cfg.s1_sizes}"
        )
    if min(cfg.s1_sizes) * cfg.transfer_n_source < cfg.batch_size:
        raise ValueError(
            f"s1_sizes: the smallest ({min(cfg.s1_sizes)} x {cfg.transfer_n_source} images) is under a batch "
            f"({cfg.batch_size})"
        )
    bad = [a for a in cfg.s1_archs if a not in architectures or a.startswith(("hyper-", "prompt"))]
    if bad or len(cfg.s1_archs) < 2 or len(set(cfg.s1_archs)) < len(cfg.s1_archs):
        raise ValueError(
            f"s1_archs must be two or more distinct plain architectures of invfast.models, got {cfg.s1_archs}"
        )
    if not 1 <= cfg.s5_objects <= cfg.transfer_objects:
        raise ValueError(f"s5_objects must be in 1..transfer_objects ({cfg.transfer_objects}), got {cfg.s5_objects}")
    for name in ("alphas", "betas"):
        v = getattr(cfg, name)
        if len(v) < 2 or not all(0.0 <= x <= 1.0 for x in v) or list(v) != sorted(set(v)):
            raise ValueError(f"{name} must be two or more increasing values in [0, 1], got {v}")
    if cfg.betas[0] != 0.0:
        raise ValueError(
            f"betas must start at 0 (S4 compares availability 0 with the first value above), got {cfg.betas}"
        )
    base_images_source(cfg.base_images)
    from invfast.synthetic import TRANSFORMATION_TYPES

    for c in cfg.categories:
        bad = [t for t in c.split("+") if t not in TRANSFORMATION_TYPES]
        if bad or not c:
            raise ValueError(
                f"categories: {c!r} is not '+'-joined Transforms-2D types ({', '.join(TRANSFORMATION_TYPES)})"
            )
    if len(cfg.categories) < 2 or len(set(cfg.categories)) < len(cfg.categories):
        raise ValueError(f"categories must be two or more distinct categories, got {cfg.categories}")
    if 2 * cfg.category_objects > 61:
        raise ValueError(
            f"category_objects must be <= 30 (and as many others for mild OOD), got {cfg.category_objects}"
        )
    if cfg.category_n < cfg.batch_size or cfg.irrelevant_n < cfg.batch_size:
        raise ValueError(f"category_n and irrelevant_n must hold at least one batch ({cfg.batch_size})")
    if cfg.sensitivity_n < 2:
        raise ValueError(f"sensitivity_n must be >= 2, got {cfg.sensitivity_n}")
    c = cfg.category_sensitivity_n
    if isinstance(c, bool) or not isinstance(c, int) or c == 1 or c < 0:
        raise ValueError(
            f"category_sensitivity_n must be 0 (as sensitivity_n) or >= 2, got {cfg.category_sensitivity_n}"
        )
