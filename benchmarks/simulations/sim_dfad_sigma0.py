# eighth session: DFAD (Fang et al. 2019) at σ=0 with a white-box teacher: a generator maximises the student-teacher L1
# gap through the teacher's input gradients, the student minimises it. Not DP-able as is (un-noised teacher input
# gradients reach the generator); run only to see whether an adversarial generator can pass 85 % at σ=0 on 2 CPU cores.
import sys, time, json, torch, torch.nn.functional as F
from dpconvert.teachers import load_teacher
from dpconvert.data import load_data
from dpconvert.students import create_student
from dpconvert.generators import create_generator
torch.set_num_threads(2); torch.manual_seed(0)
cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
T = load_teacher("benchmarks/runs/fmnist_cnn.safetensors"); spec = T.spec
test = load_data("/usr/share/datasets/fashion-mnist:test", spec)
net = T.module if hasattr(T, "module") else T
for p in getattr(net, "parameters", lambda: [])(): p.requires_grad_(False)
G = create_generator(cfg.get("gen", "dafl"), spec, conditional=False)
S = create_student(cfg.get("student", "datalens_cnn"), spec)
oS = torch.optim.Adam(S.parameters(), cfg.get("lrS", 1e-3)); oG = torch.optim.Adam(G.parameters(), cfg.get("lrG", 1e-3))
B, ns, budget = cfg.get("B", 256), cfg.get("ns", 5), cfg.get("secs", 480)
def ev():
    S.eval()
    with torch.no_grad(): acc = (torch.cat([S(c) for c in test.x.split(4096)]).argmax(1) == test.y).float().mean().item()
    S.train(); return round(acc, 4)
t0 = time.time(); it = 0
while time.time() - t0 < budget:
    for _ in range(ns):
        with torch.no_grad(): x = G(torch.randn(B, G.nz)); t = net(x)
        loss = F.l1_loss(S(x), t); oS.zero_grad(); loss.backward(); oS.step()
    x = G(torch.randn(B, G.nz)); lg = -F.l1_loss(S(x), net(x)); oG.zero_grad(); lg.backward(); oG.step()
    it += 1
    if it % 200 == 0:
        with torch.no_grad(): h = torch.bincount(net(x).argmax(1), minlength=10).tolist()
        print(it, round(time.time() - t0), "lossS", round(loss.item(), 3), "acc", ev(), "hist", h, flush=True)
print("final", it, ev())
