"""Feature extractors: ResNet-18/34/50 (ImageNet stem by default as in torchvision, CIFAR stems on
request), a CIFAR VGG-11 and a small ViT (Speicher et al.'s architecture comparison), the amortised
Hyper-ResNet and Prompt-ViT (Ericsson et al. / Chavhan et al.). All return
pooled features [B, feature_dim] from ``forward_features`` and, without a classifier head, from
``forward``; a ResNet built with ``num_classes=N`` returns logits [B, N] from ``forward``. The amortised
models take an invariance descriptor ``i`` ([K] or [B, K], entries in [0, 1]).

torchvision's constructors :func:`resnet18` / :func:`resnet34` / :func:`resnet50` (``weights=`` a
checkpoint, ``num_classes=``); one registry builds and loads by name: :func:`create` (names of
:data:`ARCHITECTURES`, :func:`list_models`, ``"package.module:callable"``, or another library's model by name,
``"timm:NAME"``, ``"torchvision:NAME"``, ``"hf:NAME"``, ``"open_clip:NAME"``: a :class:`LibraryModel` with its
head removed and its eval input in :class:`InputSpec`) and :func:`load_checkpoint` (invfast, torchvision, MoCo and
solo-learn ResNet layouts; a library's model takes its own layout; :func:`to_torchvision_state_dict` exports the
other way).
"""

from invfast.models.checkpoints import to_torchvision_state_dict
from invfast.models.constructors import resnet18, resnet34, resnet50
from invfast.models.hyper_resnet import HyperResNet
from invfast.models.library import InputSpec, LibraryModel
from invfast.models.prompt_vit import PromptViT
from invfast.models.registry import ARCHITECTURES, create, create_library_model, list_models, load_checkpoint
from invfast.models.resnet import ResNet
from invfast.models.vgg import VGG
from invfast.models.vit import ViT

__all__ = [
    "ARCHITECTURES",
    "HyperResNet",
    "InputSpec",
    "LibraryModel",
    "PromptViT",
    "ResNet",
    "VGG",
    "ViT",
    "create",
    "create_library_model",
    "list_models",
    "load_checkpoint",
    "resnet18",
    "resnet34",
    "resnet50",
    "to_torchvision_state_dict",
]
