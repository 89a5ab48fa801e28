# ensemble of M students trained on the same noisy release (different init/order), evaluated by averaged adjusted logits
import sys, torch, json, time
import importlib.util
args = sys.argv[1]
spec_ = importlib.util.spec_from_file_location("s3", str(__import__("pathlib").Path(__file__).with_name("release_sim.py"))); S = importlib.util.module_from_spec(spec_)
sys.argv = ["x", "[]"]; spec_.loader.exec_module(S)
def adj_logits(s, x, xt):
    with torch.no_grad():
        b = torch.cat([s(c) for c in x[torch.linspace(0, len(x) - 1, 20000).long()].split(4096)]).mean(0)
        return torch.cat([s(c) for c in xt.split(4096)]) - b
for cfg in json.loads(args):
    t0 = time.time(); torch.manual_seed(0); g = torch.Generator().manual_seed(cfg.get("noise_seed", 1))
    n, sig = cfg["n"], cfg["sigma"]
    z = torch.randn(n, S.P.nz); x = S.gen(z); tl = S.teach(x); r = S.rows(tl, sig, g); y = 5 * (r - r.mean(1, keepdim=True))
    res = {"single": [], "ens": []}; acc_sum = None
    for m in range(cfg["m"]):
        s = S.train(x, y, cfg.get("epochs", 3), seed=m)
        o = adj_logits(s, x, S.test.x); acc_sum = o if acc_sum is None else acc_sum + o
        res["single"].append(round((o.argmax(1) == S.test.y).float().mean().item(), 4))
        res["ens"].append(round((acc_sum.argmax(1) == S.test.y).float().mean().item(), 4))
        print(json.dumps(cfg), json.dumps(res), round(time.time() - t0), flush=True)
