"""Small CNNs for small inputs.

``datalens_cnn`` is the student of the DPDFD paper for <=32 px inputs
(DataLens: conv32-pool-conv64-dense-dense); ``wide_cnn`` is the same shape with
twice the width, used for the built-in teacher.
"""

from __future__ import annotations

import torch
from torch import nn

from dpconvert.io.spec import InputSpec

from .factory import STUDENTS


class SmallCNN(nn.Module):
    def __init__(self, spec: InputSpec, width: int = 32, hidden: int = 128, dropout: float = 0.0) -> None:
        super().__init__()
        c, h, w = spec.shape
        self.features = nn.Sequential(
            # max-pooling before the ReLU: the two commute exactly (values and gradients), and the ReLU then runs on a
            # quarter of the values (its backward was ~8 % of an 8×8 student step on 2 cores)
            nn.Conv2d(c, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.MaxPool2d(2),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.MaxPool2d(2),
            nn.ReLU(inplace=True),
            nn.Flatten(),
            nn.Linear(2 * width * (h // 4) * (w // 4), hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
        )
        self.head = nn.Linear(hidden, spec.num_classes)
        self.num_features = hidden

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)

    def forward_head(self, f: torch.Tensor) -> torch.Tensor:
        return self.head(f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


@STUDENTS.register("datalens_cnn")
def datalens_cnn(spec: InputSpec) -> nn.Module:
    return SmallCNN(spec, width=32, hidden=128)


@STUDENTS.register("wide_cnn")
def wide_cnn(spec: InputSpec) -> nn.Module:
    return SmallCNN(spec, width=64, hidden=256, dropout=0.25)
