"""Transformations: the 18 test transforms (batched over images and parameter grids) and a user's own
(:func:`register`), the pretraining policies (Default / Spatial / Appearance / Solarize-Default and the
amortised 5-way switches), the paper's preprocessing, a contact sheet, and optional DALI pipelines.

>>> import invfast.transforms as T
>>> T.TEST_TRANSFORMS                 # the 18 names
>>> T.get("rotation").apply(x, T.get("rotation").grid(256))   # [B, 256, 3, H, W]
>>> T.register("gamma", grid=lambda k: torch.linspace(0.5, 2, k), family="appearance", identity=1.0,
...            apply=lambda x, g: x.unsqueeze(1) ** g.view(1, -1, 1, 1, 1))
>>> v1, v2 = T.policy("default", size=224)(x, generator=torch.Generator().manual_seed(0))
"""

from __future__ import annotations

from invfast.transforms.builtin import APPEARANCE, SPATIAL, TEST_TRANSFORMS
from invfast.transforms.contact_sheet import contact_sheet
from invfast.transforms.policies import Policy, policy, policy_from_descriptor
from invfast.transforms.policy_config import AUGMENTATIONS, POLICIES, VALID_DESCRIPTORS, PolicyConfig
from invfast.transforms.preprocess import center_crop, preprocess, resize
from invfast.transforms.registry import get, names, register, unregister
from invfast.transforms.transform import FAMILIES, TestTransform

__all__ = [
    "APPEARANCE",
    "AUGMENTATIONS",
    "FAMILIES",
    "POLICIES",
    "Policy",
    "PolicyConfig",
    "SPATIAL",
    "TEST_TRANSFORMS",
    "TestTransform",
    "VALID_DESCRIPTORS",
    "center_crop",
    "contact_sheet",
    "get",
    "names",
    "policy",
    "policy_from_descriptor",
    "preprocess",
    "register",
    "resize",
    "unregister",
]
