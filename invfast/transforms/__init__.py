"""Transformations: the 18 test transforms (batched over images and parameter grids), the
pretraining policies (Default / Spatial / Appearance / Solarize-Default and the amortised 5-way
switches), the paper's preprocessing, a contact sheet, and optional DALI pipelines.

>>> import invfast.transforms as T
>>> T.SYNTHETIC                       # the 18 names
>>> T.get("rotation").apply(x, T.get("rotation").grid(256))   # [B, 256, 3, H, W]
>>> v1, v2 = T.policy("default", size=224)(x, generator=torch.Generator().manual_seed(0))
"""
from __future__ import annotations

from invfast.transforms.registry import APPEARANCE, SPATIAL, SYNTHETIC, TestTransform, get
from invfast.transforms.preprocess import center_crop, preprocess, resize
from invfast.transforms.policies import (
    AUGMENTATIONS,
    POLICIES,
    VALID_DESCRIPTORS,
    Policy,
    PolicyConfig,
    policy,
    policy_from_descriptor,
)
from invfast.transforms.contact_sheet import contact_sheet

__all__ = [
    "APPEARANCE", "AUGMENTATIONS", "POLICIES", "Policy", "PolicyConfig", "SPATIAL", "SYNTHETIC", "TestTransform",
    "VALID_DESCRIPTORS", "center_crop", "contact_sheet", "get", "policy", "policy_from_descriptor", "preprocess",
    "resize",
]
