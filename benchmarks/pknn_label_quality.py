"""Round-1 Private-kNN label quality on Fashion-MNIST for several (k, γ, σ1, threshold).

    python benchmarks/pknn_label_quality.py '{"k":300,"g":0.1,"s1":100}' '{"k":300,"g":0.1,"s1":50,"thr":220}'
    python benchmarks/pknn_label_quality.py '{"feat":"hog_pca","s1":50,"thr":150}'

Features `feat` (default hog; hog_pca with `d` dims and whitening power `w`, fitted
on the first 5 000 test images, unlabelled), private = the 60k training set, queries = the first 2 500 test
images; σ2 calibrated to ε=1 for `q` queries (default 5 000) as if all were
answered. Prints the answered fraction and the accuracy of the answered labels
(the test labels are used only to score, never by the mechanism).
"""

import json
import sys

import torch

from dpconvert.accounting import PknnAccountant
from dpconvert.io.data import load_data
from dpconvert.mechanisms.features import FEATURES, batched_features
from dpconvert.accounting.planning import plan_pknn
from dpconvert.mechanisms.private_knn import PknnMechanism
from dpconvert.io.spec import InputSpec

spec = InputSpec(1, 28, 28, 10, (0.286,), (0.353,))
tr = load_data("/usr/share/datasets/fashion-mnist:train", spec)
te = load_data("/usr/share/datasets/fashion-mnist", spec)
qy = te.y[:2500]
cache = {}
for arg in sys.argv[1:]:
    c = json.loads(arg)
    k, g, s1 = c.get("k", 300), c.get("g", 0.1), c["s1"]
    thr = c.get("thr", 0.6 * k)
    q = c.get("q", 5000)
    key = (c.get("feat", "hog"), c.get("d", 32), c.get("w", 1.0))
    if key not in cache:
        kw = {} if key[0] == "hog" else {"dims": key[1], "whiten": key[2]}
        phi = FEATURES.get(key[0])(spec, te.x[:5000], **kw)
        cache[key] = batched_features(phi, tr.x), batched_features(phi, te.x[:2500])
    pf, qf = cache[key]
    plan = plan_pknn(eps=1.0, delta=1e-5, k=k, sampling_rate=g, sigma1=s1, threshold=thr, sigma2=None, num_classes=10, queries=q, answered=q)
    m = PknnMechanism(tr.y, 10, k=k, sampling_rate=g, sigma1=s1, threshold=thr, sigma2=plan["sigma2"],
                      accountant=PknnAccountant(), generator=torch.Generator().manual_seed(0))
    ans = m.screen(qf, pf)
    lab = m.answer(qf[ans], pf)
    print(arg, f"sigma2 {plan['sigma2']:.1f}", f"answered {ans.float().mean().item():.3f}",
          f"label acc {(lab == qy[ans]).float().mean().item():.4f}", flush=True)
