"""Exploration harness behind the DPDFD design choices in benchmarks/RESULTS.md.

    python benchmarks/dpdfd_explore.py '{"eps": 1.0, "releases": 1, "batch_size": 300000, "student_epochs": 6, "minibatch": 2048, "student_lr": 2e-3, "gen": null}'

The JSON holds ``DpdfdConfig`` fields plus: eps (null = σ 0), teacher, eval,
gen (a learned generator name or null), cond (class-conditional generator),
use_prior (mix in the random-field prior). Prints per round: accuracy on the
evaluation data, losses, seconds, and (for development only: un-noised teacher
labels on synthetic data) the teacher's label histogram on the query source.
"""
import sys, time, json, torch
from dpconvert.io.teachers import load_teacher
from dpconvert.io.data import load_data
from dpconvert.students import create_student
from dpconvert.generators import create_generator
from dpconvert.accounting import DpdfdAccountant, calibrate
from dpconvert.distill.config import DpdfdConfig
from dpconvert.mechanisms.dpdfd import Dpdfd
torch.set_num_threads(2)
kw = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
eps = kw.pop("eps", 1.0)
teacher_src = kw.pop("teacher", "builtin:digits"); eval_src = kw.pop("eval", "builtin:digits")
gen = kw.pop("gen", "dafl"); cond = kw.pop("cond", True)
t = load_teacher(teacher_src)
test = load_data(eval_src, t.spec)
prior_flag = kw.pop("use_prior", True)
cfg = DpdfdConfig(**kw)
if eps is not None:
    cfg.sigma = calibrate.dpdfd_sigma(eps=eps, delta=1e-5, steps=cfg.releases)
torch.manual_seed(cfg.seed)
s = create_student("datalens_cnn", t.spec); g = create_generator(gen, t.spec, conditional=cond) if gen else None
prior = create_generator("random_fields", t.spec) if prior_flag else None
acc = DpdfdAccountant()
d = Dpdfd(t, s, g, cfg, acc, prior=prior)
t0 = time.time()
def cb(info):
    s.eval()
    with torch.no_grad():
        a = (s(test.x).argmax(1) == test.y).float().mean().item()
    with torch.no_grad():
        xx = d.synthesise(2000); l = torch.zeros(2000).long()
        tl = t(xx).argmax(1)
        agree_c = (tl == l).float().mean().item(); hist = torch.bincount(tl, minlength=10).tolist()
        sa = (s(xx).argmax(1) == tl).float().mean().item()
    print(f"   teacher==c {agree_c:.3f} student==teacher(gen) {sa:.3f} hist {hist}")
    print(f"round {info.round} acc {a:.4f} ls {info.student_loss:.3f} lg {info.generator_loss:.3f} {info.seconds:.1f}s {({k: round(v,1) for k,v in info.times.items()})}", flush=True)
d.run(cb)
print("eps", acc.epsilon(delta=1e-5), "sigma", cfg.sigma, "time", time.time()-t0)
