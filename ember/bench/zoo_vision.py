"""Vision models of the zoo (ResNet-50, ViT-small, ConvNeXt-tiny, MobileNetV3), random weights, from ``timm``
when it imports, otherwise from ``torchvision``. Nothing is downloaded (``pretrained=False`` /
``weights=None``).
"""
from __future__ import annotations

from collections.abc import Callable

from .models_handwritten import classify_loss
from .workload import Inputs, Workload, ZooEntry, probe, randint, randn


def _torchvision_vit_small(num_classes: int, res: int):
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=res, patch_size=16, num_layers=12, num_heads=6, hidden_dim=384,
                             mlp_dim=1536, num_classes=num_classes)


def _torchvision_builder(name: str) -> Callable:
    def build(num_classes: int, res: int):
        import torchvision.models as tvm
        if name == "vit_small":
            return _torchvision_vit_small(num_classes, res)
        if name == "mobilenetv3":
            return tvm.mobilenet_v3_large(weights=None, num_classes=num_classes, dropout=0.0)
        return getattr(tvm, name)(weights=None, num_classes=num_classes)
    return build


TIMM_NAMES = {"resnet50": "resnet50", "vit_small": "vit_small_patch16_224", "convnext_tiny": "convnext_tiny",
              "mobilenetv3": "mobilenetv3_large_100"}


def _make_model(name: str, num_classes: int, res: int):
    if probe("timm") is None:
        import timm
        extra = {"img_size": res} if name == "vit_small" else {}
        return timm.create_model(TIMM_NAMES[name], pretrained=False, num_classes=num_classes, **extra)
    return _torchvision_builder(name)(num_classes, res)


def _vision_builder(name: str) -> Callable[[dict], Workload]:
    def build(c: dict) -> Workload:
        model = _make_model(name, c["classes"], c["res"])

        def make_inputs(seed, device):
            return Inputs((randn(seed, device, c["batch"], 3, c["res"], c["res"]),),
                          target=randint(seed + 1, device, c["classes"], c["batch"]))
        return Workload(model, make_inputs, classify_loss)
    return build


_QUICK = {"batch": 2, "res": 64, "classes": 10}
_FULL = {"batch": 64, "res": 224, "classes": 1000}
VISION_ENTRIES = [ZooEntry(n, "vision", _vision_builder(n), {"quick": _QUICK, "full": _FULL},
                           requires=("timm", "torchvision"))
                  for n in ("resnet50", "vit_small", "convnext_tiny", "mobilenetv3")]
