import sys, os, time, json, math, torch, torch.nn.functional as F
from dpconvert.teachers import load_teacher
from dpconvert.data import load_data
from dpconvert.students import create_student
from dpconvert.generators import create_generator
torch.set_num_threads(2)
T = load_teacher("benchmarks/runs/fmnist_cnn.safetensors")
spec = T.spec
test = load_data("/usr/share/datasets/fashion-mnist:test", spec)
prior = create_generator("random_fields", spec)
M, SD = prior.mean, prior.std
H, W = spec.height, spec.width
yy, xx = torch.meshgrid(torch.linspace(-1, 1, H), torch.linspace(-1, 1, W), indexing="ij")

def pix(x): return x * SD + M
def unpix(p): return (p - M) / SD

def src_prior(n, g):
    z = torch.randn(n, prior.nz, generator=g)
    return torch.cat([prior(c) for c in z.split(4096)])

def envelope(n, g, lo=0.35, hi=0.95, sharp=8.0):
    ax = lo + (hi - lo) * torch.rand(n, 1, 1, 1, generator=g); ay = lo + (hi - lo) * torch.rand(n, 1, 1, 1, generator=g)
    r = ((xx / ax) ** 2 + (yy / ay) ** 2).sqrt()
    return torch.sigmoid((1 - r) * sharp)

def src_env(n, g):
    return unpix(pix(src_prior(n, g)) * envelope(n, g))

def src_sym(n, g):  # left-right mirrored prior
    p = pix(src_prior(n, g)); half = W // 2
    p = torch.cat([p[..., :half], p[..., :half].flip(-1)], -1)
    return unpix(p)

def src_symenv(n, g):
    p = pix(src_sym(n, g)) * envelope(n, g)
    return unpix(p)

def src_mix(n, g):  # half prior, half symenv
    a = src_prior(n // 2, g); b = src_symenv(n - n // 2, g)
    return torch.cat([a, b])[torch.randperm(n, generator=g)]

SOURCES = {k[4:]: v for k, v in globals().items() if k.startswith("src_")}

def get(name, n):
    os.makedirs("/tmp/sim", exist_ok=True)
    path = f"/tmp/sim/cache_{name}_{n}.pt"
    if os.path.exists(path): return torch.load(path)
    big = False
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        x = SOURCES[name](n, g)
        tl = torch.cat([T(c) for c in x.split(1024)])
    if not big: torch.save((x, tl), path)
    return x, tl

def acc(s, xs, ys, bias=None):
    with torch.no_grad():
        o = torch.cat([s(c) for c in xs.split(2048)])
        if bias is not None: o = o - bias
        return round((o.argmax(1) == ys).float().mean().item(), 4)

def run(cfg):
    x, tl = get(cfg["src"], cfg["n"])
    n = len(x); K = tl.shape[1]
    enc = cfg.get("enc", "logits")
    if enc == "logits": d = tl - tl.mean(1, keepdim=True)
    else: d = F.softmax(tl / float(enc), 1) - 1.0 / K
    u = d / d.norm(dim=1, keepdim=True)
    g = torch.Generator().manual_seed(cfg.get("noise_seed", 1))
    lam = cfg.get("lam", 5.0); sigma = cfg["sigma"]
    y = lam * (u + sigma * torch.randn(u.shape, generator=g))
    y = y - y.mean(1, keepdim=True)
    torch.manual_seed(cfg.get("seed", 0))
    s = create_student(cfg.get("student", "datalens_cnn"), spec)
    head = s.head; torch.nn.init.zeros_(head.weight); torch.nn.init.zeros_(head.bias)
    opt = torch.optim.Adam(s.parameters(), cfg.get("lr", 2e-3), weight_decay=cfg.get("wd", 0))
    ema = None
    if cfg.get("ema"):
        ema = torch.optim.swa_utils.AveragedModel(s, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(cfg["ema"]))
    mb = cfg.get("mb", 2048); epochs = cfg["epochs"]; steps = epochs * math.ceil(n / mb); k = 0
    t0 = time.time(); hist = []
    for ep in range(epochs):
        s.train()
        for idx in torch.randperm(n).split(mb):
            for gr in opt.param_groups: gr["lr"] = cfg.get("lr", 2e-3) * 0.5 * (1 + math.cos(math.pi * k / steps))
            out = s(x[idx]); out = out - out.mean(1, keepdim=True)
            loss = 0.5 * (out - y[idx]).pow(2).sum(1).mean()
            opt.zero_grad(); loss.backward(); opt.step(); k += 1
            if ema is not None: ema.update_parameters(s)
        s.eval(); hist.append(acc(s, test.x, test.y))
    res = {"raw": hist}
    for nm, mod in [("s", s)] + ([("ema", ema.module)] if ema is not None else []):
        mod.eval()
        if nm == "ema":
            torch.optim.swa_utils.update_bn([(x[i],) for i in torch.arange(min(n, 20000)).split(mb)], ema)
            ema.eval(); res["ema"] = acc(ema, test.x, test.y)
        # calibration: subtract the student's mean output over the query set (post-processing)
        with torch.no_grad():
            mu = torch.cat([mod(c) for c in x[:20000].split(2048)]).mean(0)
        res[nm + "_cal"] = acc(mod, test.x, test.y, mu)
        with torch.no_grad():
            o = torch.cat([mod(c) for c in x[:20000].split(2048)]); sd = o.std(0)
            ot = torch.cat([mod(c) for c in test.x.split(2048)])
        res[nm + "_z"] = round((((ot - mu) / sd).argmax(1) == test.y).float().mean().item(), 4)
    res["thist"] = torch.bincount(tl.argmax(1), minlength=K).tolist()
    print(json.dumps(cfg), json.dumps(res), round(time.time() - t0), flush=True)

for cfg in json.loads(sys.argv[1]):
    run(cfg)
