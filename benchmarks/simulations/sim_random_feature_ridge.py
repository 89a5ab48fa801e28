# eighth session: fixed random conv features + a closed-form ridge head fitted to the released (noisy) rows.
# Needs the sixth session's cache /tmp/sim/cache_env_400000.pt (sim_cached_sixth_session.py, src "env" = centred prior).
# Question: is the SGD-trained CNN student the inefficient estimator under noise? λ is chosen by the held-out noisy MSE
# (post-processing); the clean held-out MSE is printed beside it only to check that choice.
import sys, json, time, torch, torch.nn.functional as F
from dpconvert.data import load_data
from dpconvert.teachers import load_teacher
torch.set_num_threads(2)
cfg = json.loads(sys.argv[1])
spec = load_teacher("benchmarks/runs/fmnist_cnn.safetensors").spec
test = load_data("/usr/share/datasets/fashion-mnist:test", spec)
x_all, tl_all = torch.load("/tmp/sim/cache_env_400000.pt")
N = cfg["n"]; x, tl = x_all[:N], tl_all[:N]
g = torch.Generator().manual_seed(cfg.get("noise_seed", 1))
d = tl - tl.mean(1, keepdim=True); u = d / d.norm(dim=1, keepdim=True)
r = u + cfg["sigma"] * torch.randn(u.shape, generator=g)
y = r - r.mean(1, keepdim=True)
torch.manual_seed(cfg.get("seed", 0))
C, k, pool = cfg.get("C", 128), cfg.get("k", 5), cfg.get("pool", 4)
W = torch.randn(C, spec.channels, k, k); W = W / W.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
bias = cfg.get("b", 0.5) * torch.randn(C)
def feats(xb):
    h = F.relu(F.conv2d(xb, W, bias, padding=k // 2))
    h = F.adaptive_avg_pool2d(h, pool).flatten(1)
    return torch.cat([h, torch.ones(len(h), 1)], 1)
t0 = time.time()
nh = N // 10; D = C * pool * pool + 1
XtX = torch.zeros(D, D, dtype=torch.float64); XtY = torch.zeros(D, 10, dtype=torch.float64)
with torch.no_grad():
    for i in range(nh, N, 4096):
        f = feats(x[i:i + 4096]).double(); XtX += f.T @ f; XtY += f.T @ y[i:i + 4096].double()
    fh = torch.cat([feats(c) for c in x[:nh].split(4096)]).double(); yh, uh = y[:nh].double(), (u[:nh] - u[:nh].mean(1, keepdim=True)).double()
    fm = torch.cat([feats(c) for c in x[:20000].split(4096)]).double().mean(0)
    ft = torch.cat([feats(c) for c in test.x.split(4096)]).double()
    scale = XtX.diagonal().mean()
    out = []
    for lam in cfg.get("lams", [1e-4, 1e-3, 1e-2, 1e-1, 1]):
        Wt = torch.linalg.solve(XtX + lam * scale * torch.eye(D, dtype=torch.float64), XtY)
        ph = fh @ Wt
        pred = (ft @ Wt - fm @ Wt).argmax(1)
        out.append({"lam": lam, "mse_noisy_heldout": round((ph - yh).pow(2).sum(1).mean().item(), 4),
                    "mse_clean_heldout": round((ph - uh).pow(2).sum(1).mean().item(), 4),
                    "acc": round((pred == test.y).double().mean().item(), 4)})
print(json.dumps(cfg), json.dumps(out), round(time.time() - t0), flush=True)
