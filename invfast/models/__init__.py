"""Feature extractors: ResNet-18/34/50 (CIFAR and ImageNet stems), the amortised Hyper-ResNet
and Prompt-ViT (SPEC §3). All return pooled features [B, feature_dim] from ``forward``/``forward_features``;
the amortised models take an invariance descriptor ``i`` ([K] or [B, K], entries in [0, 1]).
"""
from invfast.models.hyper_resnet import HyperResNet
from invfast.models.prompt_vit import PromptViT
from invfast.models.registry import ARCHITECTURES, create
from invfast.models.resnet import ResNet, resnet18, resnet34, resnet50

__all__ = ["ARCHITECTURES", "HyperResNet", "PromptViT", "ResNet", "create", "resnet18", "resnet34", "resnet50"]
