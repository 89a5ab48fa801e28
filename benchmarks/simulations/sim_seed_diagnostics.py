# seed variance diagnostics at ε=1: per init seed, raw / adjusted accuracy, predicted-class histogram, per-class accuracy
import sys, torch, json, time
import importlib.util
args = sys.argv[1]
spec_ = importlib.util.spec_from_file_location("s3", str(__import__("pathlib").Path(__file__).with_name("release_sim.py"))); S = importlib.util.module_from_spec(spec_)
sys.argv = ["x", "[]"]; spec_.loader.exec_module(S)
torch.manual_seed(0); g = torch.Generator().manual_seed(1)
n = 100000
z = torch.randn(n, S.P.nz); x = S.gen(z); tl = S.teach(x); r = S.rows(tl, 3.73, g); y = 5 * (r - r.mean(1, keepdim=True))
for cfg in json.loads(args):
    t0 = time.time()
    s = S.train(x, y, cfg.get("epochs", 3), mb=cfg.get("mb", 256), lr=cfg.get("lr", 2e-3), seed=cfg["seed"])
    with torch.no_grad():
        q = torch.cat([s(c) for c in x[torch.linspace(0, n - 1, 20000).long()].split(4096)])
        o = torch.cat([s(c) for c in S.test.x.split(4096)])
    b = q.mean(0); pa = (o - b).argmax(1)
    res = {"raw": round((o.argmax(1) == S.test.y).float().mean().item(), 4), "adj": round((pa == S.test.y).float().mean().item(), 4),
           "pred_hist": torch.bincount(pa, minlength=10).tolist(), "bias": [round(v, 2) for v in b.tolist()],
           "out_std_test": round(o.std(0).mean().item(), 3), "out_std_q": round(q.std(0).mean().item(), 3)}
    print(json.dumps(cfg), json.dumps(res), round(time.time() - t0), flush=True)
