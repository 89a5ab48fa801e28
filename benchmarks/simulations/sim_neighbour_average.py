# denoising by neighbours: student 1 on noisy rows -> its features -> kNN-average the released rows -> student 2
import sys, torch, json, time
import torch.nn.functional as F
sys.argv, args = sys.argv[:1], sys.argv[1]
import importlib.util
spec_ = importlib.util.spec_from_file_location("s3", str(__import__("pathlib").Path(__file__).with_name("release_sim.py"))); S = importlib.util.module_from_spec(spec_)
sys.argv = ["x", "[]"]; spec_.loader.exec_module(S)
def feats(s, x):
    s.eval()
    with torch.no_grad(): return torch.cat([s.forward_features(c).flatten(1) for c in x.split(4096)])
def knn_smooth(f, y, k):
    f = F.normalize(f, dim=1); out = torch.empty_like(y)
    for i in range(0, len(f), 2048):
        sim = f[i:i + 2048] @ f.T
        idx = sim.topk(k, dim=1).indices
        out[i:i + 2048] = y[idx].mean(1)
    return out
def run(cfg):
    t0 = time.time(); torch.manual_seed(0); g = torch.Generator().manual_seed(cfg.get("noise_seed", 1))
    n, sig = cfg["n"], cfg["sigma"]
    z = torch.randn(n, S.P.nz); x = S.gen(z); tl = S.teach(x); r = S.rows(tl, sig, g); y = 5 * (r - r.mean(1, keepdim=True))
    s1 = S.train(x, y, cfg.get("e1", 3)); res = {"s1": S.evaluate(s1, x)[0]}
    f = feats(s1, x)
    for k in cfg["ks"]:
        ys = knn_smooth(f, y, k)
        # how close are the smoothed rows to the clean ones (cosine), vs raw
        d = tl - tl.mean(1, keepdim=True); u = d / d.norm(dim=1, keepdim=True)
        res["cos_raw"] = round(F.cosine_similarity(y, u).mean().item(), 3); res[f"cos_k{k}"] = round(F.cosine_similarity(ys, u).mean().item(), 3)
        if cfg.get("retrain", 1):
            s2 = S.train(x, ys, cfg.get("e2", 3)); res[f"s2_k{k}"] = S.evaluate(s2, x)[0]
        print(json.dumps(cfg), json.dumps(res), round(time.time() - t0), flush=True)
for cfg in json.loads(args): run(cfg)
