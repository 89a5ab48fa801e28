"""Which timm architecture a bare state_dict belongs to, and the class count and input channels its weights imply.

A weights-only checkpoint (``torch.save(model.state_dict())``, safetensors) does not say its architecture, but its
keys and shapes do: ResNet-18 and ResNet-34 differ in their block counts, ResNet-50 and ResNet-50-D in their stems.
``guess_timm_arch`` builds each common timm family on PyTorch's meta device (no memory, no weights, no download)
and keeps the ones whose keys and shapes match exactly, except the classifier's output size and the first
convolution's input channels, which the weights then give (``head_classes``, ``first_conv_channels``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

# Common timm families a checkpoint is likely to come from (timm names; tried in this order).
CANDIDATES = (
    "resnet10t", "resnet18", "resnet18d", "resnet26", "resnet34", "resnet34d", "resnet50", "resnet50d", "resnet101", "resnet152",
    "resnet200d", "seresnet50", "wide_resnet50_2", "resnext50_32x4d", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2",
    "efficientnet_b3", "mobilenetv2_100", "mobilenetv3_small_100", "mobilenetv3_large_100", "mnasnet_100", "ghostnet_100",
    "convnext_atto", "convnext_tiny", "convnext_small", "convnext_base", "regnetx_002", "regnety_008", "densenet121", "vgg11",
    "vgg16", "vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224", "deit_tiny_patch16_224",
    "swin_tiny_patch4_window7_224", "levit_128", "mobilevit_s",
)


@lru_cache(maxsize=None)
def _signature(name: str) -> Optional[tuple[dict, str, str]]:
    """({key: shape}, classifier prefix, first-conv prefix) of a timm architecture, built on the meta device."""
    import timm
    import torch

    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False)
    except Exception:  # noqa: BLE001 — a family this timm does not have
        return None
    cfg = model.pretrained_cfg or {}
    classifier = cfg.get("classifier") or ""
    first = cfg.get("first_conv") or ""
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}, classifier if isinstance(classifier, str) else classifier[0], \
        first if isinstance(first, str) else first[0]


def _matches(state_shapes: dict, name: str) -> bool:
    sig = _signature(name)
    if sig is None:
        return False
    shapes, classifier, first = sig
    if set(shapes) != set(state_shapes):
        return False
    for key, shape in shapes.items():
        got = state_shapes[key]
        if len(got) != len(shape):
            return False
        if key.startswith(classifier + "."):  # the class count is the checkpoint's own
            if got[1:] != shape[1:]:
                return False
        elif key == f"{first}.weight":  # so are the input channels
            if got[0] != shape[0] or got[2:] != shape[2:]:
                return False
        elif got != shape:
            return False
    return True


def guess_timm_arch(state: dict) -> list[str]:
    """The candidate timm names whose keys and shapes fit ``state`` (usually one; empty when none does)."""
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    return [name for name in CANDIDATES if _matches(shapes, name)]


def close_families(state: dict, n: int = 3) -> list[str]:
    """The candidates sharing the most keys with ``state``: what to suggest when none fits exactly."""
    keys = set(state)
    scored = []
    for name in CANDIDATES:
        sig = _signature(name)
        if sig is not None:
            scored.append((len(keys & set(sig[0])) / max(1, len(keys | set(sig[0]))), name))
    return [name for score, name in sorted(scored, reverse=True)[:n] if score > 0.5]


def head_classes(state: dict, name: str) -> Optional[int]:
    """The class count the checkpoint's classifier produces (its weight's first dimension)."""
    sig = _signature(name)
    w = state.get(f"{sig[1]}.weight") if sig else None
    return int(w.shape[0]) if w is not None and w.ndim >= 1 else None


def first_conv_channels(state: dict, name: str) -> Optional[int]:
    """The input channels of the checkpoint's first convolution."""
    sig = _signature(name)
    w = state.get(f"{sig[2]}.weight") if sig else None
    return int(w.shape[1]) if w is not None and w.ndim >= 2 else None
