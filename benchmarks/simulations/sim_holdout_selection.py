# can the released rows pick the better init? held-out released rows as a validation set (post-processing)
import sys, torch, json, time
import importlib.util
args = sys.argv[1]
spec_ = importlib.util.spec_from_file_location("s3", str(__import__("pathlib").Path(__file__).with_name("release_sim.py"))); S = importlib.util.module_from_spec(spec_)
sys.argv = ["x", "[]"]; spec_.loader.exec_module(S)
torch.manual_seed(0); g = torch.Generator().manual_seed(1)
n = 100000; h = 10000
z = torch.randn(n, S.P.nz); x = S.gen(z); tl = S.teach(x); r = S.rows(tl, 3.73, g); y = 5 * (r - r.mean(1, keepdim=True))
d = tl - tl.mean(1, keepdim=True); clean = 5 * d / d.norm(dim=1, keepdim=True)
for seed in json.loads(args):
    t0 = time.time()
    s = S.train(x[:-h], y[:-h], 3, seed=seed)
    with torch.no_grad():
        o = torch.cat([s(c) for c in x[-h:].split(4096)]); o = o - o.mean(1, keepdim=True)
    res = {"seed": seed, "val_noisy_mse": round(0.5 * (o - y[-h:]).pow(2).sum(1).mean().item(), 4),
           "val_clean_mse": round(0.5 * (o - clean[-h:]).pow(2).sum(1).mean().item(), 4), "test": S.evaluate(s, x[:-h])[0]}
    print(json.dumps(res), round(time.time() - t0), flush=True)
