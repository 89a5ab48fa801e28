"""How a teacher labels the data-independent random-field prior.

    python benchmarks/prior_histogram.py builtin:digits benchmarks/runs/fmnist_cnn.safetensors

Prints the teacher's class histogram on 5 000 prior samples (seed 0).
"""

import sys

import torch

from dpconvert.generators import create_generator
from dpconvert.io.teachers import load_teacher

for source in sys.argv[1:]:
    t = load_teacher(source)
    g = create_generator("random_fields", t.spec)
    x = g(torch.randn(5000, g.nz, generator=torch.Generator().manual_seed(0)))
    print(source, torch.bincount(t(x).argmax(1), minlength=t.spec.num_classes).tolist())
