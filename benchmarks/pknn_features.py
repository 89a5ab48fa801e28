"""Which first-round feature map φ gives Private-kNN the best votes (no noise, no privacy spent).

    python benchmarks/pknn_features.py

Fashion-MNIST: private = 60k training set, queries = the first 2 000 test
images, a 10 % Poisson subsample per query, k = 300. For each φ prints the
accuracy of the noise-free vote argmax and, for votes whose top count ≥ 120
(the default screening threshold 0.4·k), the share of queries and their accuracy.
The projection of ``hog_pca`` is fitted on the first 5 000 test images
(unlabelled: the benchmark's public set). Test labels only score the votes.
"""

import torch
import torch.nn.functional as F

from dpconvert.io.data import load_data
from dpconvert.mechanisms.features import FEATURES, batched_features
from dpconvert.io.spec import InputSpec

spec = InputSpec(1, 28, 28, 10, (0.286,), (0.353,))
tr = load_data("/usr/share/datasets/fashion-mnist:train", spec)
te = load_data("/usr/share/datasets/fashion-mnist", spec)
public, q, qy = te.x[:5000], te.x[:2000], te.y[:2000]
variants = ([("hog", {})] + [("hog_pca", {"dims": d, "whiten": w}) for d in (32, 48, 64, 128) for w in (0.0, 0.5, 1.0)])
for name, kw in variants:
    phi = FEATURES.get(name)(spec, public, **kw)
    pf, qf = batched_features(phi, tr.x), batched_features(phi, q)
    g = torch.Generator().manual_seed(0)
    votes = []
    for c in qf.split(500):
        d = torch.cdist(c, pf)
        d.masked_fill_(~(torch.rand(d.shape, generator=g) < 0.1), float("inf"))
        _, idx = d.topk(300, dim=1, largest=False)
        votes.append(F.one_hot(tr.y[idx].long(), 10).sum(1))
    v = torch.cat(votes)
    pred, conf = v.argmax(1), v.max(1).values >= 120
    print(f"{name} {kw}: vote accuracy {(pred == qy).float().mean():.3f}; top ≥ 120: {conf.float().mean():.2f} of queries, "
          f"accuracy {(pred[conf] == qy[conf]).float().mean():.3f}", flush=True)
