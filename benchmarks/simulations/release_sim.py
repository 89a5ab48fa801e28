# latent mutation: release 1 on prior samples; parents per class by the released (noisy) row; children = mutated latents; release 2
import sys, torch, math, json, time
import torch.nn.functional as F
from dpconvert.teachers import load_teacher
from dpconvert.data import load_data
from dpconvert.students import create_student
from dpconvert.generators import create_generator
torch.set_num_threads(2)
T = load_teacher("benchmarks/runs/fmnist_cnn.safetensors"); spec = T.spec
test = load_data("/usr/share/datasets/fashion-mnist:test", spec)
P = create_generator("centred_fields", spec); K = 10
def gen(z): 
    with torch.no_grad(): return torch.cat([P(c) for c in z.split(4096)])
def teach(x):
    with torch.no_grad(): return torch.cat([T(c) for c in x.split(2048)])
def rows(tl, sigma, g):
    d = tl - tl.mean(1, keepdim=True); u = d / d.norm(dim=1, keepdim=True)
    return u + sigma * torch.randn(u.shape, generator=g)
AUG = 0
def augment(x):
    x = torch.where(torch.rand(len(x), 1, 1, 1) < 0.5, x.flip(-1), x)
    dx, dy = torch.randint(-2, 3, (2,)).tolist()
    return torch.roll(x, (dy, dx), (2, 3))
STUDENT = "datalens_cnn"
def train(x, y, epochs, mb=256, lr=2e-3, seed=0):
    torch.manual_seed(seed); s = create_student(STUDENT, spec); torch.nn.init.zeros_(s.head.weight); torch.nn.init.zeros_(s.head.bias)
    opt = torch.optim.Adam(s.parameters(), lr); n = len(x); steps = epochs * math.ceil(n / mb); k = 0
    for ep in range(epochs):
        s.train()
        for idx in torch.randperm(n).split(mb):
            for gr in opt.param_groups: gr["lr"] = lr * 0.5 * (1 + math.cos(math.pi * k / steps))
            xb = augment(x[idx]) if AUG else x[idx]; out = s(xb); out = out - out.mean(1, keepdim=True)
            loss = 0.5 * (out - y[idx]).pow(2).sum(1).mean(); opt.zero_grad(); loss.backward(); opt.step(); k += 1
    s.eval(); return s
def evaluate(s, x):
    with torch.no_grad():
        b = torch.cat([s(c) for c in x[torch.linspace(0, len(x) - 1, 20000).long()].split(4096)]).mean(0)
        o = torch.cat([s(c) for c in test.x.split(4096)]) - b
    pred = o.argmax(1); acc = (pred == test.y).float().mean().item()
    pc = [round((pred[test.y == c] == c).float().mean().item(), 2) for c in range(K)]
    return round(acc, 4), pc
def run(cfg):
    global AUG, STUDENT; AUG = cfg.get("aug", 0); STUDENT = cfg.get("student", "datalens_cnn")
    t0 = time.time(); torch.manual_seed(cfg.get("seed", 0)); g = torch.Generator().manual_seed(cfg.get("noise_seed", 1))
    n1, n2, sig, a = cfg["n1"], cfg["n2"], cfg["sigma"], cfg.get("a", 0.3)
    z1 = torch.randn(n1, P.nz); x1 = gen(z1); t1 = teach(x1); r1 = rows(t1, sig, g)
    res = {"hist1": torch.bincount(t1.argmax(1), minlength=K).tolist()}
    xs, rs = [x1], [r1]
    if n2:
        # parents: for each class, the latents whose released row scores that class highest (post-processing of r1)
        if cfg.get("by") == "student":  # a student trained on release 1 (post-processing) denoises the rows
            s1 = train(x1, 5 * (r1 - r1.mean(1, keepdim=True)), cfg.get("e1", 2), mb=cfg.get("mb", 256))
            res["s1"] = evaluate(s1, x1)[0]
            with torch.no_grad(): score = torch.cat([s1(c) for c in x1.split(4096)])
            score = F.log_softmax(score - score.mean(0), 1)
        else:
            score = r1 - r1.mean(0)  # per-class centring so rare classes still get parents
        per = n2 // K; kids = []
        for c in range(K):
            top = score[:, c].argsort(descending=True)[: cfg.get("parents", 500)]
            pz = z1[top[torch.randint(len(top), (per,))]]
            kids.append(math.sqrt(1 - a * a) * pz + a * torch.randn(pz.shape))
        z2 = torch.cat(kids); x2 = gen(z2); t2 = teach(x2); r2 = rows(t2, sig, g)
        res["hist2"] = torch.bincount(t2.argmax(1), minlength=K).tolist(); xs.append(x2); rs.append(r2)
    x, r = torch.cat(xs), torch.cat(rs); y = 5 * (r - r.mean(1, keepdim=True))
    s = train(x, y, cfg.get("epochs", 3), mb=cfg.get("mb", 256))
    res["acc"], res["per_class"] = evaluate(s, x)
    print(json.dumps(cfg), json.dumps(res), round(time.time() - t0), flush=True)
for cfg in json.loads(sys.argv[1]): run(cfg)
