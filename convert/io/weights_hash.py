"""The hash of a model's weights, whatever file holds them.

A file hash tells two files apart, not two models: the same weights re-saved with one more metadata entry, renamed
keys or another tensor order give another file hash, and two copies of one teacher would count as two disjoint
partitions' teachers. The weights hash is computed from the tensors alone: each tensor in a canonical form
(float64, little-endian, C order, prefixed by its shape) hashed on its own, then the sorted digests hashed together,
so it depends on neither names, order, container format nor metadata. For an ONNX model the tensors are its
initializers and the tensors of its Constant nodes; for a torch module, its state dict (parameters and buffers).
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Optional

METHOD = ("sha256 over the sorted sha256 digests of every weight tensor (float64, little-endian, C order, prefixed by its shape); "
          "independent of names, order, file format and metadata")


def tensors_sha256(arrays: Iterable) -> str:
    import numpy as np

    digests = []
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a, dtype="<f8"))
        h = hashlib.sha256(repr(tuple(a.shape)).encode())
        h.update(a.tobytes())
        digests.append(h.hexdigest())
    return hashlib.sha256("\n".join(sorted(digests)).encode()).hexdigest()


def module_weights_sha256(module) -> Optional[str]:
    import torch

    try:
        state = module.state_dict()
    except Exception:  # noqa: BLE001 — a wrapped or exported module without a state dict: no weights hash
        return None
    arrays = [t.detach().to("cpu", torch.float64).numpy() for t in state.values() if isinstance(t, torch.Tensor) and t.numel() > 0]
    return tensors_sha256(arrays) if arrays else None


def onnx_weights_sha256(proto) -> Optional[str]:
    from onnx import numpy_helper

    arrays = [numpy_helper.to_array(t) for t in proto.graph.initializer]
    for node in proto.graph.node:
        if node.op_type == "Constant":
            arrays += [numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"]
    arrays = [a for a in arrays if a.size > 0 and a.dtype.kind in "fiub"]
    return tensors_sha256(arrays) if arrays else None
