# pool-selection simulation: release 1 -> student -> class-balanced selection from a pool -> release 2
import sys, time, json, math, torch, torch.nn.functional as F
from dpconvert.teachers import load_teacher
from dpconvert.data import load_data
from dpconvert.students import create_student
torch.set_num_threads(2)
T = load_teacher("benchmarks/runs/fmnist_cnn.safetensors")
spec = T.spec
test = load_data("/usr/share/datasets/fashion-mnist:test", spec)
X, TL = torch.load("/tmp/sim/cache_env_400000.pt")
K = TL.shape[1]

def noisy(tl, sigma, g, lam=5.0):
    d = tl - tl.mean(1, keepdim=True); u = d / d.norm(dim=1, keepdim=True)
    y = lam * (u + sigma * torch.randn(u.shape, generator=g)); return y - y.mean(1, keepdim=True)

def logits(s, x):
    s.eval()
    with torch.no_grad(): return torch.cat([s(c) for c in x.split(4096)])

def acc(s, bias):
    return round(((logits(s, test.x) - bias).argmax(1) == test.y).float().mean().item(), 4)

def train(x, y, epochs, mb, seed, lr=2e-3, s=None):
    torch.manual_seed(seed)
    if s is None:
        s = create_student("datalens_cnn", spec); torch.nn.init.zeros_(s.head.weight); torch.nn.init.zeros_(s.head.bias)
    opt = torch.optim.Adam(s.parameters(), lr); n = len(x); steps = epochs * math.ceil(n / mb); k = 0
    for ep in range(epochs):
        s.train()
        for idx in torch.randperm(n).split(mb):
            for gr in opt.param_groups: gr["lr"] = lr * 0.5 * (1 + math.cos(math.pi * k / steps))
            out = s(x[idx]); out = out - out.mean(1, keepdim=True)
            loss = 0.5 * (out - y[idx]).pow(2).sum(1).mean()
            opt.zero_grad(); loss.backward(); opt.step(); k += 1
    return s

def bias_of(s, x): return logits(s, x[torch.linspace(0, len(x) - 1, 20000).long()]).mean(0)

def select(s, xpool, n, how):
    o = logits(s, xpool); o = o - o.mean(0)  # adjusted
    p = F.softmax(o, 1); conf, cls = p.max(1); per = n // K; keep = []
    for c in range(K):
        idx = (cls == c).nonzero().squeeze(1)
        if how == "conf": idx = idx[conf[idx].argsort(descending=True)]
        else: idx = idx[torch.randperm(len(idx))]
        keep.append(idx[:per])
    keep = torch.cat(keep)
    if len(keep) < n:
        rest = torch.ones(len(xpool), dtype=torch.bool); rest[keep] = False
        others = rest.nonzero().squeeze(1); keep = torch.cat([keep, others[torch.randperm(len(others))[: n - len(keep)]]])
    return keep

def run(cfg):
    t0 = time.time(); g = torch.Generator().manual_seed(cfg.get("noise_seed", 1))
    n1, n2, sig = cfg["n1"], cfg["n2"], cfg["sigma"]; e1, e2, mb = cfg["e1"], cfg["e2"], cfg.get("mb", 512)
    x1, y1 = X[:n1], noisy(TL[:n1], sig, g)
    res = {}
    if cfg.get("how", "conf") == "none":  # baseline: random second half
        x2, t2 = X[n1:n1 + n2], TL[n1:n1 + n2]
    else:
        s1 = train(x1, y1, e1, mb, cfg.get("seed", 0)); res["s1"] = acc(s1, bias_of(s1, x1))
        pool = X[n1:n1 + cfg.get("pool", 300000)]
        sel = select(s1, pool, n2, cfg["how"]); x2, t2 = pool[sel], TL[n1:][sel]
    res["hist2"] = torch.bincount(t2.argmax(1), minlength=K).tolist()
    y2 = noisy(t2, sig, g)
    x, y = torch.cat([x1, x2]), torch.cat([y1, y2])
    s = train(x, y, e2, mb, cfg.get("seed", 0))
    res["final"] = acc(s, bias_of(s, x)); res["raw"] = acc(s, torch.zeros(K))
    print(json.dumps(cfg), json.dumps(res), round(time.time() - t0), flush=True)

for cfg in json.loads(sys.argv[1]):
    run(cfg)
