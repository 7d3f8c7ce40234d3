"""Feature extractors: ResNet-18/34/50 (ImageNet stem by default as in torchvision, CIFAR stem on
request), the amortised Hyper-ResNet and Prompt-ViT (Ericsson et al. / Chavhan et al.). All return
pooled features [B, feature_dim] from ``forward``/``forward_features``; the amortised models take an
invariance descriptor ``i`` ([K] or [B, K], entries in [0, 1]).

One registry builds and loads them: :func:`create` (names of :data:`ARCHITECTURES` or
``"package.module:callable"``) and :func:`load_checkpoint` (invfast, torchvision, MoCo and solo-learn
ResNet layouts; :func:`to_torchvision_state_dict` exports the other way).
"""
from invfast.models.checkpoints import to_torchvision_state_dict
from invfast.models.hyper_resnet import HyperResNet
from invfast.models.prompt_vit import PromptViT
from invfast.models.registry import ARCHITECTURES, create, load_checkpoint
from invfast.models.resnet import ResNet, resnet18, resnet34, resnet50

__all__ = ["ARCHITECTURES", "HyperResNet", "PromptViT", "ResNet", "create", "load_checkpoint", "resnet18", "resnet34",
           "resnet50", "to_torchvision_state_dict"]
