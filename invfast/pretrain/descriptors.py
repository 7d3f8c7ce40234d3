"""Invariance descriptors for amortised pretraining (Chavhan et al. 2023).

``groups`` (K = 2): [1, 1] default, [1, 0] spatial, [0, 1] appearance.
``individual`` (K = 5): switches for (crop, flip, colour jitter, grayscale, blur); the 26
combinations with at least two augmentations on.
"""

from __future__ import annotations

import itertools

import torch

__all__ = [
    "GROUP_NAMES",
    "INDIVIDUAL_AUGMENTATIONS",
    "DESCRIPTOR_SETS",
    "descriptor_set",
    "describe",
    "descriptor_policies",
]

GROUP_NAMES = ("default", "spatial", "appearance")
INDIVIDUAL_AUGMENTATIONS = ("crop", "flip", "jitter", "grayscale", "blur")
DESCRIPTOR_SETS = ("groups", "individual")


def descriptor_set(name: str) -> torch.Tensor:
    """The binary descriptors of set ``name`` as a float32 tensor [n, K] (3×2 or 26×5)."""
    if name == "groups":
        return torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    if name == "individual":
        rows = [r for r in itertools.product((0.0, 1.0), repeat=5) if sum(r) >= 2]
        return torch.tensor(rows)
    raise ValueError(f"unknown descriptor set {name!r}; choose one of {DESCRIPTOR_SETS}")


def describe(name: str, row: torch.Tensor) -> str:
    """Human-readable label of one descriptor of set ``name`` (e.g. 'spatial', 'crop+flip+blur')."""
    if name == "groups":
        for lbl, d in zip(GROUP_NAMES, descriptor_set("groups")):
            if torch.equal(d, row.float().cpu()):
                return lbl
        raise ValueError(f"{row.tolist()} is not a 'groups' descriptor")
    return "+".join(a for a, on in zip(INDIVIDUAL_AUGMENTATIONS, row.tolist()) if on) or "none"


def descriptor_policies(name: str, size: int) -> list:
    """One augmentation policy per descriptor of set ``name`` (the rows of :func:`descriptor_set`), at image size
    ``size``: :func:`invfast.transforms.policy_from_descriptor` of each row."""
    from invfast import transforms as T

    return [T.policy_from_descriptor(row, size=size) for row in descriptor_set(name)]
