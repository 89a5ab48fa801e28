"""DPDFD mechanism: noise matches what the accountant is told; σ=0 is plain distillation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dpconvert.accounting import DpdfdAccountant, dpdfd
from dpconvert.distill.models import classifier
from dpconvert.distill.rounds import DpdfdRounds, planned_student_samples
from tests.engine import engine_config, released_once, run_rounds
from dpconvert.mechanisms.dpdfd import Dpdfd
from dpconvert.mechanisms.output_gradients import label_log_likelihood, per_sample_output_gradient
from dpconvert.generators import GENERATORS, create_generator
from dpconvert.mechanisms.gaussian_release import NormalisedGaussianRelease
from dpconvert.io.spec import InputSpec
from dpconvert.students import STUDENTS, create_student

SPEC = InputSpec(1, 8, 8, 10, (0.3,), (0.4,))


@pytest.mark.parametrize("sigma,clip", [(3.0, 1.0), (25.0, 0.1), (0.5, 2.0)])
def test_released_noise_matches_recorded_parameters(sigma, clip):
    """If the noise drawn ever drifts from σ·C (what the accountant is told), this fails."""
    acc = DpdfdAccountant()
    mech = NormalisedGaussianRelease(sigma=sigma, clip=clip, accountant=acc, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(20000, 10) * 7
    released = mech.release(grads)
    noise = released - mech.normalise(grads)
    assert torch.allclose(mech.normalise(grads).norm(dim=1), torch.full((20000,), clip), atol=1e-5)
    # std of 200k N(0, (σC)²) draws: relative standard error ≈ 0.16 %
    assert noise.std().item() == pytest.approx(sigma * clip, rel=0.01)
    assert noise.mean().abs().item() < 5 * sigma * clip / math.sqrt(noise.numel())
    (ev,) = acc.events
    assert ev.params == {"sigma": sigma, "clip": clip, "batch_size": 20000} and ev.count == 1
    assert acc.epsilon(delta=1e-5) == dpdfd.epsilon(sigma=sigma, steps=1, delta=1e-5)


def test_every_release_is_counted():
    acc = DpdfdAccountant()
    mech = NormalisedGaussianRelease(sigma=2.0, clip=1.0, accountant=acc, generator=torch.Generator().manual_seed(0))
    for _ in range(7):
        mech.release(torch.randn(5, 10))
    assert acc.count("normalised_gaussian_release") == 7


def test_ce_output_gradient_closed_form():
    s = torch.randn(6, 10, requires_grad=True)
    t = torch.randn(6, 10)
    loss = F.cross_entropy(s, t.argmax(1), reduction="sum")
    (auto,) = torch.autograd.grad(loss, s)
    assert torch.allclose(per_sample_output_gradient(s.detach(), t, engine_config(distill_loss="ce")), auto, atol=1e-6)


def test_sigma_zero_decodes_the_teacher_label_exactly():
    acc = DpdfdAccountant()
    mech = NormalisedGaussianRelease(sigma=0.0, clip=1.0, accountant=acc, generator=torch.Generator())
    s, t = torch.randn(50, 10), torch.randn(50, 10)
    g = mech.release(per_sample_output_gradient(s, t, engine_config(distill_loss="ce")))
    assert torch.equal(label_log_likelihood(s, g, mech).argmax(1), t.argmax(1))


def _teacher_student_and_twin():
    """A teacher, a student, and an identical copy of the student to train by hand."""
    torch.manual_seed(0)
    teacher = create_student("datalens_cnn", SPEC).eval()
    student = create_student("datalens_cnn", SPEC)
    twin = create_student("datalens_cnn", SPEC)
    twin.load_state_dict(student.state_dict())
    return teacher, student, twin


def _release_and_train(teacher, student, cfg, order_seed):
    """One DPDFD release and one replay; returns the released inputs (minibatch order from ``order_seed``)."""
    job = Dpdfd(lambda x: teacher(x), student, None, cfg, DpdfdAccountant(), prior=create_generator("random_fields", SPEC))
    done = released_once(job)
    done.trainer.rng = torch.Generator().manual_seed(order_seed)
    done.train_student()
    return done.released_inputs()


@pytest.mark.parametrize("loss", ["ce", "logits"])
def test_sigma_zero_equals_plain_distillation(loss):
    """With no noise, the DP student update is plain distillation (opacus' test_compare_to_vanilla, for DPDFD): same
    data, same order, same cosine schedule, same weights. ce: the decoded label scores; logits (the default): the
    paper's y_s = s − γ·ḡ, compared shift-invariantly."""
    from dpconvert.distill.student_training import cosine_lr
    from dpconvert.distill.models import classifier

    teacher, student, twin = _teacher_student_and_twin()
    cfg = engine_config(releases=1, batch_size=64, sigma=0.0, distill_loss=loss, target_step=1.0, score_scale=5.0, student_epochs=1,
                      minibatch=16, prior_pool=1, head_refit=False)  # the refitted head: its own tests below
    if cfg.zero_head:  # as the engine does: the first release is taken at s = 0
        torch.nn.init.zeros_(classifier(twin).weight)
        torch.nn.init.zeros_(classifier(twin).bias)
    x = _release_and_train(teacher, student, cfg, order_seed=123)
    twin.to(memory_format=torch.channels_last)  # the engine's layout: the same arithmetic in the same float order

    # plain distillation, written out independently
    with torch.no_grad():
        t = teacher(x)
        twin.eval()
        s0 = twin(x.contiguous(memory_format=torch.channels_last))
    if loss == "ce":
        y = 5.0 * (F.one_hot(t.argmax(1), 10).float() - 0.1)
    else:  # Algorithm 1: y_s = s − γ·ḡ, ḡ the normalised gradient of ½‖centred(s − t)‖²
        d = (s0 - t) - (s0 - t).mean(1, keepdim=True)
        y = s0 - d / (d.norm(dim=1, keepdim=True) + 1e-6)
    y = y - y.mean(1, keepdim=True)
    twin.train()
    opt = torch.optim.Adam(twin.parameters(), lr=cfg.student_lr)
    for n, idx in enumerate(torch.randperm(64, generator=torch.Generator().manual_seed(123)).split(16)):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(cfg.student_lr, n, 4)
        out = twin(x[idx].contiguous(memory_format=torch.channels_last))
        loss_value = 0.5 * (out - out.mean(1, keepdim=True) - y[idx]).pow(2).sum(1).mean()
        opt.zero_grad()
        loss_value.backward()
        opt.step()
    for a, b in zip(student.parameters(), twin.parameters()):
        assert torch.allclose(a, b, atol=1e-5)


def _refitted_and_twin(sigma: float):
    """A student trained on one release and its head refitted, and its twin trained alike without the refit (every
    non-head weight checked equal); the released inputs and rows, the twin's eval-mode features with a ones column,
    and the refit's RidgeFit."""
    teacher, student, twin = _teacher_student_and_twin()
    kw = dict(releases=1, batch_size=512, sigma=sigma, distill_loss="logits", student_epochs=1, minibatch=64, prior_pool=1)
    runs, fits = [], []
    for model, refit in ((student, True), (twin, False)):
        job = Dpdfd(lambda x: teacher(x), model, None, engine_config(**kw, head_refit=refit), DpdfdAccountant(),
                    prior=create_generator("random_fields", SPEC), noise=torch.Generator().manual_seed(3))
        done = released_once(job)
        done.trainer.rng = torch.Generator().manual_seed(7)
        spy = done.trainer.refit_head
        done.trainer.refit_head = lambda *a: fits.append(spy(*a))
        done.train_student()
        runs.append(done)
    for (name, a), b in zip(student.named_parameters(), twin.parameters()):
        if not name.startswith("head."):
            assert torch.equal(a, b), name
    x, y = runs[1].released_inputs(), runs[1].buffer_y[0]
    assert torch.equal(x, runs[0].released_inputs()) and torch.equal(y, runs[0].buffer_y[0])
    twin.eval()
    with torch.no_grad():
        f = twin.forward_features(x.contiguous(memory_format=torch.channels_last)).double()
    design = torch.cat([f, torch.ones(len(f), 1, dtype=f.dtype)], 1)
    head = classifier(student)
    assert not torch.allclose(head.weight, classifier(twin).weight, atol=1e-3)  # it did replace the optimiser's head
    fitted = design @ torch.cat([head.weight.T, head.bias[None]]).double().detach()
    return (y - y.mean(1, keepdim=True)).double(), design, fitted, runs[0].cfg, fits[0]


def test_the_least_squares_head_is_the_ols_fit_to_the_released_rows():
    """head_refit at σ = 0 (no noise to trade against): the classifier is the least-squares fit of the released
    (centred) targets on the features the trained student computes in evaluation mode, written out here
    independently; every other weight is the optimiser's, as without it."""
    target, design, fitted, _, fit = _refitted_and_twin(0.0)
    w = torch.linalg.lstsq(design, target, driver="gelsd").solution
    assert fit.penalty == 0.0
    # compared through the fit (the weights of 129 features on 512 rows are ill-conditioned; the fit is not)
    assert torch.allclose(fitted, design @ w, atol=1e-4)
    rss, least = (fitted - target).pow(2).sum(), (design @ w - target).pow(2).sum()
    assert rss <= least * (1 + 1e-6)


def test_under_noise_the_head_is_the_ridge_fit_at_the_penalty_stein_s_risk_estimate_picks():
    """σ > 0: the head is (FᵀF + λI)⁻¹FᵀT at a positive λ, solved here directly, and λ is the grid's minimum of
    ‖T − S T‖² − n·tr Σ + 2·tr S·tr Σ with tr Σ = (γσC)²·(K − 1), the centred rows' noise, from the release's σ, C and
    γ written out here (a drift in the noise the refit assumes moves the pick)."""
    from dpconvert.distill.ridge import PENALTY_GRID

    target, design, fitted, cfg, fit = _refitted_and_twin(0.5)
    noise_trace = (cfg.target_step * 0.5 * cfg.clip) ** 2 * (SPEC.num_classes - 1)
    gram = design.T @ design
    live = torch.linalg.eigvalsh(gram)
    scale = float(live[live > live.max() * 1e-12].mean())
    risks = []
    for lam in [0.0] + (PENALTY_GRID * scale).tolist():
        w = torch.linalg.lstsq(gram + lam * torch.eye(len(gram), dtype=gram.dtype), design.T @ target).solution
        dof = float(torch.trace(torch.linalg.lstsq(gram + lam * torch.eye(len(gram), dtype=gram.dtype), gram).solution))
        risks.append((float((design @ w - target).pow(2).sum()) - len(design) * noise_trace + 2 * dof * noise_trace, lam, w))
    risk, lam, w = min(risks, key=lambda r: r[0])
    assert lam > 0 and abs(fit.penalty - lam) <= 1e-6 * lam
    assert torch.allclose(fitted, design @ w, atol=1e-4)


def test_the_least_squares_head_is_left_out_where_rows_are_few_for_the_features():
    """(γσC)²·(D+1)/n against (γC)²/K: the digits default (σ ≈ 4.2, 750 000 rows, 128 features, K = 10) and the
    former one (σ ≈ 4, 300 000 rows) refit; a 224-px teacher's 16 384 rows at K = 1 000 do not; nor a CE release, nor
    head_refit off."""
    from dpconvert.distill.student_training import head_refit_applies

    digits, imagenet = torch.nn.Linear(128, 10), torch.nn.Linear(128, 1000)
    assert head_refit_applies(engine_config(sigma=4.22), digits, 750_000)
    assert head_refit_applies(engine_config(sigma=3.99), digits, 300_000)
    assert not head_refit_applies(engine_config(sigma=3.99), imagenet, 16_384)
    assert not head_refit_applies(engine_config(sigma=3.99), digits, 5_000)
    assert head_refit_applies(engine_config(sigma=7.58), digits, 300_000)  # ε = 0.5 on the digits
    assert head_refit_applies(engine_config(sigma=0.0), imagenet, 16_384)
    assert not head_refit_applies(engine_config(sigma=0.0, distill_loss="ce"), digits, 300_000)
    assert not head_refit_applies(engine_config(sigma=0.0, head_refit=False), digits, 300_000)


def test_logit_output_gradient_closed_form():
    s = torch.randn(6, 10, requires_grad=True)
    t = torch.randn(6, 10)
    centred = lambda v: v - v.mean(1, keepdim=True)  # noqa: E731
    loss = 0.5 * (centred(s) - centred(t)).pow(2).sum()
    (auto,) = torch.autograd.grad(loss, s)
    assert torch.allclose(per_sample_output_gradient(s.detach(), t, engine_config(distill_loss="logits")), auto, atol=1e-6)


def test_logit_release_at_zero_head_is_the_teacher_ranking():
    """A zero student head puts the first release at s = 0: the normalised row is −C·(t − t̄)/‖t − t̄‖."""
    torch.manual_seed(0)
    cfg = engine_config(releases=1, batch_size=40, sigma=0.0, clip=0.5, student_epochs=1, minibatch=40)
    assert (cfg.distill_loss, cfg.student_target, cfg.zero_head) == ("logits", "centred", True)
    teacher = create_student("datalens_cnn", SPEC).eval()
    job = Dpdfd(lambda x: teacher(x), create_student("datalens_cnn", SPEC), None, cfg, DpdfdAccountant(),
                prior=create_generator("random_fields", SPEC))
    done = released_once(job)
    x, y = done.released_inputs(), done.buffer_y[0]
    with torch.no_grad():
        t = teacher(x)
    t = t - t.mean(1, keepdim=True)
    expected = cfg.target_step * 0.5 * t / (t.norm(dim=1, keepdim=True) + 1e-6)
    assert torch.allclose(y, expected, atol=1e-5)
    assert torch.equal(y.argsort(1), t.argsort(1))  # the whole ranking, not only the top class


def test_progress_display_does_not_change_the_student():
    """The CLI attaches a held-out batch for its progress bar; the library may not. Same seed → same student."""
    torch.manual_seed(0)
    teacher = create_student("datalens_cnn", SPEC).eval()
    init = create_student("datalens_cnn", SPEC).state_dict()
    students = []
    for watch in (False, True):
        student = create_student("datalens_cnn", SPEC)
        student.load_state_dict(init)
        cfg = engine_config(releases=2, batch_size=64, sigma=1.0, student_epochs=3, minibatch=32, prior_pool=2)
        job = Dpdfd(lambda x: teacher(x), student, None, cfg, DpdfdAccountant(), prior=create_generator("random_fields", SPEC),
                    noise=torch.Generator().manual_seed(1))  # the same noise in both runs (the default stream is secret)
        if watch:
            job.attach_holdout(100)
        run_rounds(job, on_progress=(lambda info: None) if watch else None)
        students.append(student.state_dict())
    assert all(torch.equal(students[0][k], students[1][k]) for k in init)


def test_the_time_estimate_counts_the_student_samples_the_run_trains_on():
    """The up-front estimate plans the student samples of every round; the rounds then train on exactly that many."""
    torch.manual_seed(0)
    cfg = engine_config(releases=3, batch_size=32, sigma=1.0, student_epochs=2, minibatch=16)
    job = Dpdfd(lambda x: torch.randn(len(x), 10), create_student("datalens_cnn", SPEC), None, cfg, DpdfdAccountant(),
                prior=create_generator("random_fields", SPEC))
    trained = []
    fit = job.model.fit_forward
    job.model.fit_forward = lambda x: (trained.append(len(x)), fit(x))[1]
    planned = planned_student_samples(job.cfg)
    run_rounds(job)
    assert planned == sum(trained) == 2 * 32 * (1 + 2 + 3)


def test_cosine_schedule_decays_the_student_lr_to_zero_over_each_replay():
    torch.manual_seed(0)
    cfg = engine_config(releases=1, batch_size=64, sigma=1.0, student_epochs=2, minibatch=16, logit_adjust=False)
    job = Dpdfd(lambda x: torch.randn(len(x), 10), create_student("datalens_cnn", SPEC), None, cfg, DpdfdAccountant(),
                prior=create_generator("random_fields", SPEC))
    seen = []
    done = DpdfdRounds(job)
    opt = done.trainer.opt
    step = opt.step
    opt.step = lambda: (seen.append(opt.param_groups[0]["lr"]), step())
    done.run()
    assert len(seen) == 8 and seen[0] == cfg.student_lr
    assert all(a > b for a, b in zip(seen, seen[1:])) and seen[-1] < 0.05 * cfg.student_lr


def test_teacher_is_only_called_forward_without_grad():
    calls = []

    def teacher(x):
        calls.append((x.requires_grad, torch.is_grad_enabled()))
        return torch.randn(x.shape[0], 10)

    cfg = engine_config(releases=2, batch_size=32, sigma=1.0, student_epochs=1, minibatch=32, prior_pool=2)
    job = Dpdfd(teacher, create_student("datalens_cnn", SPEC), None, cfg, DpdfdAccountant(), prior=create_generator("random_fields", SPEC))
    run_rounds(job)
    assert calls and all(not rg and not ge for rg, ge in calls)


@pytest.mark.parametrize("name", GENERATORS.names())
def test_generators_produce_normalised_inputs(name):
    g = create_generator(name, SPEC)
    z = torch.randn(4, g.nz)
    x = g(z, torch.arange(4) if g.num_classes else None)
    assert x.shape == (4, 1, 8, 8)
    pixels = x * 0.4 + 0.3
    assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5


@pytest.mark.parametrize("name", STUDENTS.names() + ["timm:resnet18"])
def test_students_build_for_small_and_mnist_sizes(name):
    for spec in (SPEC, InputSpec(1, 28, 28, 10)):
        m = create_student(name, spec).eval()
        assert m(torch.zeros(2, *spec.shape)).shape == (2, 10)


def test_logit_adjustment_centres_the_student_on_the_queries_and_is_post_processing():
    """After logit_adjust the student's mean logits over the released queries are zero, only the head bias moved,
    and the accountant saw exactly the releases (the adjustment spends nothing)."""
    torch.manual_seed(0)
    teacher = create_student("datalens_cnn", SPEC).eval()
    init = create_student("datalens_cnn", SPEC).state_dict()
    trained = {}
    for adjust in (False, True):
        student = create_student("datalens_cnn", SPEC)
        student.load_state_dict(init)
        accountant = DpdfdAccountant()
        cfg = engine_config(releases=1, batch_size=200, sigma=1.0, student_epochs=1, minibatch=50, logit_adjust=adjust)
        job = Dpdfd(lambda x: teacher(x), student, None, cfg, accountant, prior=create_generator("random_fields", SPEC),
                    noise=torch.Generator().manual_seed(1))
        done = run_rounds(job)
        assert accountant.count(NormalisedGaussianRelease.mechanism) == 1
        trained[adjust] = student.eval()
    with torch.no_grad():
        x = done.released_inputs()
        mean_before = trained[False](x).mean(0)
        assert trained[True](x).mean(0).abs().max() < 1e-4 < mean_before.abs().max()
    a, b = trained[False].state_dict(), trained[True].state_dict()
    assert [k for k in a if not torch.equal(a[k], b[k])] == ["head.bias"]
    assert torch.allclose(b["head.bias"], a["head.bias"] - mean_before, atol=1e-5)


def test_centred_prior_is_an_object_on_a_dark_background():
    """centred_fields: the random-field samples inside a centred ellipse (corners dark, centre as in random_fields)."""
    spec = InputSpec(1, 28, 28, 10)
    plain, centred = create_generator("random_fields", spec), create_generator("centred_fields", spec)
    z = torch.randn(512, centred.nz, generator=torch.Generator().manual_seed(0))
    pixels = centred(z) * centred.std + centred.mean
    corners = torch.stack([pixels[..., 0, 0], pixels[..., 0, -1], pixels[..., -1, 0], pixels[..., -1, -1]])
    assert corners.max() < 0.05 and pixels[..., 10:18, 10:18].mean() > 0.1
    assert centred.nz == plain.nz + 3  # the plain prior keeps its latent layout (and so its samples)
    inside = centred(z) * centred.std + centred.mean  # where the ellipse is ~1 the pixels are the plain prior's
    assert torch.allclose(inside[..., 14, 14], (plain(z[:, : plain.nz]) * plain.std + plain.mean)[..., 14, 14], atol=0.01)


def test_mirrored_prior_makes_half_of_the_centred_samples_symmetric():
    """mirrored_fields: the centred prior with one more latent that makes about half the samples left–right symmetric;
    the others are the centred prior's samples of the same latents."""
    spec = InputSpec(1, 28, 28, 10)
    centred, mirrored = create_generator("centred_fields", spec), create_generator("mirrored_fields", spec)
    z = torch.randn(400, mirrored.nz, generator=torch.Generator().manual_seed(0))
    x = mirrored(z)
    symmetric = (x - x.flip(3)).flatten(1).abs().amax(1) < 1e-5
    assert mirrored.nz == centred.nz + 1 and 0.4 < symmetric.float().mean() < 0.6
    assert torch.allclose(x[~symmetric], centred(z[:, : centred.nz])[~symmetric], atol=1e-6)
    assert not (centred(z[:, : centred.nz]) - centred(z[:, : centred.nz]).flip(3)).flatten(1).abs().amax(1).lt(1e-5).any()


def test_framed_prior_stretches_the_mirrored_samples_from_the_centre():
    """framed_fields: the mirrored prior's samples with two more latents that pick how much of the centre fills the
    canvas; the centre pixel stays where it was, and a stretched sample covers more of the frame."""
    spec = InputSpec(1, 28, 28, 10)
    mirrored, framed = create_generator("mirrored_fields", spec), create_generator("framed_fields", spec)
    z = torch.randn(400, framed.nz, generator=torch.Generator().manual_seed(0))
    before, after = (g(z[:, : g.nz]) * g.std + g.mean for g in (mirrored, framed))
    assert framed.nz == mirrored.nz + 2
    assert torch.allclose(after[..., 13:15, 13:15].mean((2, 3)), before[..., 13:15, 13:15].mean((2, 3)), atol=0.05)
    assert (after > 0.5).float().mean() > (before > 0.5).float().mean() * 1.1


def test_default_prior_follows_the_input_size():
    from dpconvert.generators import PRIORS, default_prior_name

    assert default_prior_name(SPEC) == "random_fields"  # 8×8: the prior that carries the digits results
    assert default_prior_name(InputSpec(1, 28, 28, 10)) == "framed_fields"
    assert default_prior_name(InputSpec(3, 32, 32, 10)) == "natural_crops"  # RGB ≥ 32 px: photographs' crops
    assert default_prior_name(InputSpec(3, 16, 16, 10)) == "framed_fields"
    assert set(PRIORS) <= set(GENERATORS.names())


def _public_source(n_images, **augment):
    from dpconvert.generators.public_images import PublicImageSource

    return PublicImageSource(torch.randn(n_images, SPEC.channels, SPEC.height, SPEC.width, generator=torch.Generator().manual_seed(0)),
                             **augment)


def test_a_release_never_repeats_an_input():
    """The query-level sensitivity C holds when one teacher answer moves one row: a repeated input is redrawn."""
    source = _public_source(20, max_shift=1, flip=True, mix_prob=0.0, subpixel=False)  # 20 images × 9 shifts × 2 flips = 360 inputs
    teacher, student, _ = _teacher_student_and_twin()
    job = Dpdfd(lambda x: teacher(x), student, None, engine_config(releases=1, batch_size=200, sigma=1.0), DpdfdAccountant(),
                prior=source)
    x = released_once(job).released_inputs()
    assert len(x) == len(torch.unique(x.flatten(1), dim=0)) == 200
    # 200 plain draws from 360 inputs do repeat (birthday bound), so this test fails if the redraw is removed
    z, _ = job.queries.sample(200, source.nz)
    assert len(torch.unique(source(z).flatten(1), dim=0)) < 200


def test_a_release_larger_than_the_distinct_inputs_is_refused():
    from dpconvert.errors import DpconvertError

    teacher, student, _ = _teacher_student_and_twin()
    job = Dpdfd(lambda x: teacher(x), student, None, engine_config(releases=1, batch_size=5, sigma=1.0), DpdfdAccountant(),
                prior=_public_source(3, max_shift=0, flip=False, mix_prob=0.0))
    with pytest.raises(DpconvertError, match="only 3 distinct inputs.*`batch_size`"):
        job.release(1)
    assert not job.accountant.events
    by_source = Dpdfd(lambda x: teacher(x), student, None, engine_config(releases=1, batch_size=5, sigma=1.0, student_data="sources"),
                      DpdfdAccountant(), prior=_public_source(3, max_shift=0, flip=False, mix_prob=0.0))
    with pytest.raises(DpconvertError, match="only 3 distinct inputs.*`batch_size`"):
        by_source.release(1)
    assert not by_source.accountant.events


def test_views_of_source_images_are_distinct_and_averaged_per_image():
    """student_data "sources": every view in a release is a new input (checked by hash, the views are not kept), and
    each image's target is the mean of the rows released about it."""
    source = _public_source(4, max_shift=1, flip=True, mix_prob=0.0, subpixel=False)  # 4 × 9 × 2 = 72 inputs
    teacher, student, _ = _teacher_student_and_twin()
    cfg = engine_config(releases=1, batch_size=40, sigma=0.0, student_data="sources", denoise="none")
    job = Dpdfd(lambda x: teacher(x), student, None, cfg, DpdfdAccountant(), prior=source)
    done = released_once(job)
    assert not done.buffer_x and int(done.source_targets.counts.sum()) == 40
    idx, targets = done.denoised_source_targets()
    # σ = 0 and a zero head: each row is γ·(t − t̄)/‖t − t̄‖, so the mean over an image's views is computable here
    job2 = Dpdfd(lambda x: teacher(x), student, None, cfg, DpdfdAccountant(), prior=source)
    z = job2.distinct_prior_draws(40)  # the same stream: the release's views
    assert len(torch.unique(source(z).flatten(1), dim=0)) == 40
    with torch.no_grad():
        t = teacher(source(z))
    rows = cfg.target_step * (t - t.mean(1, keepdim=True)) / (t - t.mean(1, keepdim=True)).norm(dim=1, keepdim=True)
    base = source.base_index(z)
    expected = torch.stack([rows[base == i].mean(0) for i in idx])
    assert torch.allclose(targets, expected, atol=1e-4)


@pytest.mark.slow
def test_two_million_distinct_views_from_five_thousand_images():
    """Sub-pixel shifts: a GPU-sized release of distinct inputs from a few thousand public images (8×8 here for speed)."""
    source = _public_source(5000, mix_prob=0.0)
    teacher, student, _ = _teacher_student_and_twin()
    job = Dpdfd(lambda x: teacher(x), student, None, engine_config(batch_size=2_000_000, student_data="sources"), DpdfdAccountant(),
                prior=source)
    z = job.distinct_prior_draws(2_000_000)
    assert len(z) == 2_000_000
    assert int(torch.bincount(source.base_index(z), minlength=5000).min()) > 300  # ~400 views of every image
    # replayed rows (the default) keep the views themselves: 200 000 from 500 images, where integer shifts gave at most 25 000
    rows = Dpdfd(lambda x: teacher(x), student, None, engine_config(batch_size=200_000), DpdfdAccountant(),
                 prior=_public_source(500, mix_prob=0.0))
    assert len(torch.unique(rows.distinct_queries(200_000).flatten(1), dim=0)) == 200_000


def test_first_occurrences_is_exact():
    """The hashed distinct-input check finds exactly what sorting whole rows finds (copies, ±0.0, collisions aside)."""
    from dpconvert.mechanisms.distinct_inputs import first_occurrences

    def reference(x):
        _, inverse = torch.unique((x + 0.0).reshape(len(x), -1), dim=0, return_inverse=True)
        first = torch.full((int(inverse.max()) + 1,), len(x), dtype=torch.long).scatter_reduce(0, inverse, torch.arange(len(x)), "amin")
        return first.sort().values

    g = torch.Generator().manual_seed(0)
    for _ in range(100):
        n = int(torch.randint(1, 200, (1,), generator=g))
        base = torch.randint(-1, 2, (n, 1, 2, 2), generator=g).float()  # few values: many copies, and −0.0 from −1·0
        x = torch.cat([base, -base[torch.randint(0, n, (n // 2,), generator=g)] * -1])
        x = x[torch.randperm(len(x), generator=g)]
        assert torch.equal(first_occurrences(x), reference(x))
    x = torch.zeros(3, 2)
    x[1] = -0.0
    assert first_occurrences(x).tolist() == [0]


def test_chunked_helpers_fill_one_output_exactly_as_joining_the_chunks_would():
    """``batched`` and ``row_hash`` write chunk results into one preallocated output (a list of them fragments the heap):
    the same numbers as joining per-chunk results, across a partial last chunk, and nothing for no rows."""
    from dpconvert.distill.models import batched
    from dpconvert.mechanisms.distinct_inputs import row_hash

    x = torch.randn(1000, 3)
    fn = lambda c: torch.cat([c.sum(1, keepdim=True), c.max(1, keepdim=True).values], 1)  # noqa: E731
    assert torch.equal(batched(fn, x, 64), torch.cat([fn(c) for c in x.split(64)]))
    assert batched(fn, x[:0], 64).shape == (0, 2)
    flat = torch.randn(16384 + 300, 5)  # one full hashing chunk and a partial one
    one_by_one = torch.stack([row_hash(r.unsqueeze(0))[0] for r in flat[16380:16390]])
    assert torch.equal(row_hash(flat)[16380:16390], one_by_one)


def test_empirical_bayes_denoiser_beats_the_raw_means_and_keeps_clean_ones():
    """Post-processing of released means: closer to the clean targets than the noisy means; no noise → unchanged."""
    from dpconvert.distill.source_targets import DENOISERS

    g = torch.Generator().manual_seed(0)
    protos = torch.randn(10, 10, generator=g) * 3
    clean = protos[torch.randint(0, 10, (4000,), generator=g)] + 0.2 * torch.randn(4000, 10, generator=g)
    noisy = clean + torch.randn(4000, 10, generator=g)  # per-entry noise variance 1
    denoised = DENOISERS.get("bayes")(noisy, torch.ones(4000), 0)
    raw_err, eb_err = (noisy - clean).pow(2).sum(1).mean(), (denoised - clean).pow(2).sum(1).mean()
    assert eb_err < 0.3 * raw_err
    assert torch.equal(DENOISERS.get("bayes")(clean, torch.zeros(4000), 0), clean)
    assert torch.equal(DENOISERS.get("none")(noisy, torch.ones(4000), 0), noisy)


def test_classifier_is_the_last_linear_of_a_sequential_head():
    """ScatterNet students keep their classifier inside a Sequential head (zeroing it used to crash DPDFD)."""
    from dpconvert.io.spec import InputSpec
    from dpconvert.distill.models import classifier
    from dpconvert.students import create_student

    spec = InputSpec(1, 8, 8, 10, (0.0,), (1.0,))
    for name in ("scatternet_linear", "scatternet_cnn", "datalens_cnn"):
        student = create_student(name, spec)
        head = classifier(student)
        assert isinstance(head, torch.nn.Linear) and head.out_features == 10
        x = torch.rand(3, 1, 8, 8)
        assert torch.allclose(student.forward_head(student.forward_features(x)), student(x))


def test_keeping_z_instead_of_images_trains_the_same_student():
    """Large inputs keep the prior's z and re-render (3×224×224: 152 floats per row instead of 150 528); the student
    must be the one trained on the kept images, weight for weight."""
    students = []
    for limit in (2**30, 0):  # images kept / z kept
        torch.manual_seed(0)
        student = create_student("datalens_cnn", SPEC)
        teacher = create_student("datalens_cnn", SPEC).eval()
        cfg = engine_config(releases=2, batch_size=300, sigma=2.0, student_epochs=2, minibatch=64, prior_pool=1, image_buffer_bytes=limit)
        job = Dpdfd(lambda x: teacher(x), student, None, cfg, DpdfdAccountant(), prior=create_generator("random_fields", SPEC),
                    noise=torch.Generator().manual_seed(5))
        assert job.store_z == (limit == 0)
        done = run_rounds(job)
        assert done.buffer_x[0].shape[1:] == ((job.prior.nz,) if limit == 0 else (1, 8, 8))
        students.append(student.state_dict())
    for k, v in students[0].items():
        assert torch.equal(v, students[1][k]), k


def test_device_defaults_and_bf16_autocast(tmp_path):
    """A GPU gets larger releases and bf16 autocast by default; under bf16 the release itself stays fp32 (rows of norm C
    plus N(0, σ²C²) noise, one event) and the card says which settings the device chose."""
    import json

    import dpconvert
    from dpconvert.methods.dpdfd_options import default_batch_size, default_epochs

    big = InputSpec(3, 224, 224, 1000, (0.5,) * 3, (0.25,) * 3)
    assert default_batch_size(SPEC, "cuda") > default_batch_size(SPEC, "cpu")
    assert default_batch_size(big, "cuda:1") > default_batch_size(big, "cpu")
    assert default_epochs(big, "cpu") < default_epochs(big, "cuda")
    from dpconvert.students import default_student_name

    assert default_student_name(big, "cpu") == "reduced_cnn" and default_student_name(big, "cuda:0") == "timm:resnet18"
    assert default_student_name(SPEC, "cpu") == default_student_name(SPEC, "cuda") == "datalens_cnn"
    r = dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", eps=1, batch_size=3000, epochs=1, amp="bf16")
    card = json.loads(r.card_json.read_text())
    assert card["mechanism"]["config"]["amp"] == "bf16"
    assert card["mechanism"]["device_defaults"] == {"device": "cpu", "batch_size": False, "epochs": False, "student": True, "amp": False}
    assert [m.passed for m in dpconvert.audit([str(r.out)])] == [True]

    torch.manual_seed(0)
    teacher = create_student("datalens_cnn", SPEC).eval()
    cfg = engine_config(releases=1, batch_size=500, sigma=0.0, student_epochs=1, amp="bf16")
    job = Dpdfd(lambda x: teacher(x), create_student("datalens_cnn", SPEC), None, cfg, DpdfdAccountant(),
                prior=create_generator("random_fields", SPEC), noise=torch.Generator().manual_seed(1))
    done = released_once(job)
    assert done.buffer_y[0].dtype == torch.float32
    g = (job.student_on(done.buffer_x[0]) - done.buffer_y[0]) / cfg.target_step  # σ = 0: the normalised rows themselves
    assert torch.allclose(g.norm(dim=1), torch.ones(500), atol=1e-4)


def test_fixed_prior_images_are_data_free_per_image_targets(tmp_path):
    """--prior-images N: views of N fixed prior images, targets averaged per image; the card calls it data-free and
    carries no per-image ε (the images are nobody's data); the same ε as any release; refused with public data."""
    import json

    import dpconvert
    from dpconvert.errors import DpconvertError

    r = dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", eps=1, batch_size=4000, epochs=2, prior_images=100)
    card = json.loads(r.card_json.read_text())
    m = card["mechanism"]
    assert m["config"]["student_data"] == "sources" and "100 fixed images" in m["query_source"] and m["query_source"].endswith("data-free")
    assert m["config"]["denoise"] == "none"  # prior images' targets are used as released (DATA_FREE_DENOISE)
    assert "public_images" not in m and "per_image_epsilon" not in card["guarantee"]
    assert card["guarantee"]["epsilon"] == pytest.approx(1.0)
    assert [a.passed for a in dpconvert.audit([str(r.out)])] == [True]
    with pytest.raises(DpconvertError, match="prior_images"):
        dpconvert.convert("builtin:digits", out=tmp_path / "t.onnx", eps=1, prior_images=100, generator="dafl")


def test_public_images_mixed_with_fixed_prior_images(tmp_path):
    """--public-data with --prior-images N: both are queried and averaged per image; only the public images count
    towards the per-image ε (the prior's are nobody's data), and the card says the queries are a mixture."""
    import json

    import dpconvert
    from dpconvert.io.data import digits_split

    public = len(digits_split("test"))
    r = dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", eps=1, batch_size=4000, epochs=1, prior_images=200,
                          public_data="builtin:digits:test")
    card = json.loads(r.card_json.read_text())
    m = card["mechanism"]
    assert "mixed with 200 fixed images of the data-free prior" in m["query_source"] and m["config"]["student_data"] == "sources"
    assert m["config"]["denoise"] == "bayes"  # public images keep the empirical-Bayes denoiser
    assert m["public_images"]["images"] == public and m["public_images"]["images_queried"] <= public
    assert m["public_images"]["max_rows_per_image"] < 4000 * 2 / (public + 200) + 20  # prior images' rows not counted as public
    assert "per_image_epsilon" in card["guarantee"]
    assert [a.passed for a in dpconvert.audit([str(r.out)])] == [True]


def test_prior_images_are_never_counted_as_public_sources():
    from dpconvert.generators.public_images import PublicImageSource

    src = PublicImageSource(torch.zeros(10, 1, 8, 8), mix_prob=0.5, public_count=6)
    pairs = src.sources(torch.randn(5000, 7, generator=torch.Generator().manual_seed(0)))
    assert int(pairs.max()) == 5 and src.num_sources == 6
    assert bool((src.base_index(torch.randn(5000, 7)) >= 6).any())  # …but their targets are still averaged per image


def test_fixed_prior_images_are_the_default_above_8x8_inputs():
    """The measured default (5 000 fixed prior images) applies to 28×28-sized inputs with no other query source, and
    B/300 of them to larger ones; an explicit value, public images, a generator, `rows` or 8×8 inputs keep one target
    per prior sample."""
    from types import SimpleNamespace

    from dpconvert.distill.config import DpdfdConfig
    from dpconvert.methods.dpdfd_options import (DATA_FREE_PER_IMAGE_BATCH, DEFAULT_PRIOR_IMAGES, LARGE_INPUT_MIN_IMAGES,
                                                 LARGE_INPUT_STUDENT_SAMPLES, LARGE_INPUT_VIEWS_PER_IMAGE, DpdfdOptions,
                                                 default_student_samples, prior_images, public_targets)

    fmnist, digits = InputSpec(1, 28, 28, 10), InputSpec(1, 8, 8, 10)
    plain, public = SimpleNamespace(public_data=None), SimpleNamespace(public_data="pub.npz")
    assert prior_images(plain, DpdfdOptions(), fmnist) == DEFAULT_PRIOR_IMAGES
    assert public_targets(plain, DpdfdOptions(), fmnist) == "per-image"
    assert prior_images(plain, DpdfdOptions(), digits) == 0 and public_targets(plain, DpdfdOptions(), digits) == "rows"
    large = InputSpec(3, 64, 64, 10)  # above 28×28-sized: as many images as give each LARGE_INPUT_VIEWS_PER_IMAGE views of B
    assert prior_images(plain, DpdfdOptions(), large, 150_000) == 150_000 // LARGE_INPUT_VIEWS_PER_IMAGE
    assert prior_images(plain, DpdfdOptions(), large, 1000) == LARGE_INPUT_MIN_IMAGES
    assert prior_images(plain, DpdfdOptions(), large) == DATA_FREE_PER_IMAGE_BATCH // LARGE_INPUT_VIEWS_PER_IMAGE
    assert public_targets(plain, DpdfdOptions(), large) == "per-image" and prior_images(public, DpdfdOptions(), large) == 0
    assert prior_images(plain, DpdfdOptions(), InputSpec(3, 224, 224, 10), 150_000) == 0  # too slow here for 100 000 rows
    # their student: 200 000 views in all (400 000 on 28×28, the engine's own), or `epochs` passes over the images
    assert default_student_samples(plain, DpdfdOptions(), large, 500) == LARGE_INPUT_STUDENT_SAMPLES < DpdfdConfig.student_samples
    assert default_student_samples(plain, DpdfdOptions(), fmnist, 5000) is None
    assert default_student_samples(plain, DpdfdOptions(epochs=3), large, 500) == 1500
    assert prior_images(plain, DpdfdOptions(prior_images=0), fmnist) == 0
    assert prior_images(plain, DpdfdOptions(prior_images=300), digits) == 300
    assert prior_images(public, DpdfdOptions(), fmnist) == 0
    assert prior_images(plain, DpdfdOptions(generator="dafl"), fmnist) == 0
    assert prior_images(plain, DpdfdOptions(public_targets="rows"), fmnist) == 0


def test_the_data_free_recipe_sets_rows_and_shrinkage_only_for_prior_images():
    """Data-free prior images get the measured recipe (3 M rows, targets shrunk towards a first student); public
    images keep 1 M rows and no shrinkage; an explicit `shrink_to_student` (either way) or `batch_size` is kept."""
    from types import SimpleNamespace

    from dpconvert.methods.dpdfd_options import (DATA_FREE_PER_IMAGE_BATCH, PER_IMAGE_BATCH, DpdfdOptions, engine_option_settings,
                                                 per_image_batch, shrinks_to_student)

    fmnist = InputSpec(1, 28, 28, 10)
    plain, public = SimpleNamespace(public_data=None), SimpleNamespace(public_data="pub.npz")
    assert per_image_batch(plain, DpdfdOptions(), fmnist) == DATA_FREE_PER_IMAGE_BATCH > PER_IMAGE_BATCH
    assert per_image_batch(public, DpdfdOptions(), fmnist) == PER_IMAGE_BATCH
    assert shrinks_to_student(plain, DpdfdOptions(), fmnist) and not shrinks_to_student(public, DpdfdOptions(), fmnist)
    assert not shrinks_to_student(plain, DpdfdOptions(shrink_to_student=False), fmnist)
    assert shrinks_to_student(public, DpdfdOptions(shrink_to_student=True), fmnist)
    assert not shrinks_to_student(plain, DpdfdOptions(), InputSpec(1, 8, 8, 10))  # rows: nothing to shrink
    assert engine_option_settings(DpdfdOptions(), fmnist, run=plain)["shrink_to_student"] is True
    assert engine_option_settings(DpdfdOptions(), fmnist, run=public)["shrink_to_student"] is False


def test_a_conversion_checks_its_options_once(tmp_path, monkeypatch):
    """The pipeline calls the method's ``check`` before loading the teacher; ``run`` does not repeat it ("One place
    per concept, round 3")."""
    import dpconvert
    from dpconvert.methods import METHODS

    method = METHODS.get("dpdfd")
    calls = []
    original = type(method).check
    monkeypatch.setattr(type(method), "check", lambda self, *a, **k: calls.append(a) or original(self, *a, **k))
    dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", eps=1, batch_size=2000, epochs=1)
    assert len(calls) == 1


def test_shrink_towards_the_first_student_is_the_gaussian_posterior_mean():
    """shrink_towards: no noise keeps each target; noise the targets' spread cannot exceed returns the student's
    answer (γ·its centred, normalised logits); in between, the posterior mean μ + s²/(s² + v)·(y − μ) with s² the
    spread the noise does not explain."""
    from dpconvert.distill.source_targets import shrink_towards

    g = torch.Generator().manual_seed(0)
    y, logits = torch.randn(50, 10, generator=g), torch.randn(50, 10, generator=g)
    centred = logits - logits.mean(1, keepdim=True)
    mu = 5.0 * centred / centred.norm(dim=1, keepdim=True)
    assert torch.allclose(shrink_towards(y, torch.zeros(50), logits, 5.0), y, atol=1e-6)
    assert torch.allclose(shrink_towards(y, torch.full((50,), 1e6), logits, 5.0), mu, atol=1e-3)
    v = torch.full((50,), 0.5)
    s2 = float(((y - mu) ** 2).mean()) - 0.5
    assert torch.allclose(shrink_towards(y, v, logits, 5.0), mu + s2 / (s2 + 0.5) * (y - mu), atol=1e-5)


def test_shrink_to_student_trains_a_second_student_from_the_initial_weights():
    """cfg.shrink_to_student: the last round trains a first student, shrinks the targets towards its answers and
    trains the student again from the weights it started with (seeded: a run without the option and a run with it
    start alike; the shrunk run ends elsewhere), all after the one release (no teacher call, no further event)."""
    source = _public_source(4, max_shift=1, flip=True, mix_prob=0.0, subpixel=False)
    ends = {}
    for shrink in (False, True):
        teacher, student, _ = _teacher_student_and_twin()
        cfg = engine_config(releases=1, batch_size=40, sigma=1.0, student_data="sources", denoise="none", student_samples=64,
                            shrink_to_student=shrink)
        job = Dpdfd(lambda x: teacher(x), student, None, cfg, DpdfdAccountant(), prior=source)
        before = {k: v.clone() for k, v in job.model.module.state_dict().items()}
        done = run_rounds(job)
        assert len(job.accountant.events) == 1 and (done.initial_student is not None) == shrink
        if shrink:
            assert all(torch.equal(before[k], v) for k, v in done.initial_student.items())
        ends[shrink] = [p.detach().clone() for p in student.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(ends[False], ends[True]))


def test_the_first_release_skips_the_zero_head_students_forward_and_releases_the_same_rows():
    """Before it trains, a zero-head student answers 0 everywhere: the release runs its forward on the first chunk only
    (to check that) and the released rows are the numbers the full forward gives (same noise stream)."""
    torch.manual_seed(0)
    teacher = create_student("datalens_cnn", SPEC).eval()
    init = create_student("datalens_cnn", SPEC).state_dict()
    released, calls = [], []
    for skip in (True, False):
        student = create_student("datalens_cnn", SPEC)
        student.load_state_dict(init)
        cfg = engine_config(releases=2, batch_size=3000, sigma=1.0, student_epochs=1, minibatch=256)
        job = Dpdfd(lambda x: teacher(x), student, None, cfg, DpdfdAccountant(), prior=create_generator("random_fields", SPEC),
                    noise=torch.Generator().manual_seed(1))
        job.chunk = job.group = 1000  # three groups (of one teacher call each) per release
        if not skip:
            job._student_answers_zero = lambda s_logits: False
        n: list = []
        job.model = _Counting(job.model, n)
        rows, y, _ = job.release(1)
        released.append(y)
        calls.append(len(n))
    assert calls == [1, 3]
    assert torch.equal(released[0], released[1])
    with torch.no_grad():
        classifier(job.student).weight.add_(0.1)
    assert not Dpdfd._student_answers_zero(job, job.model(job.probe_inputs(8)))  # a student that trained runs its forward


class _Counting:
    def __init__(self, model, calls):
        self._model, self._calls = model, calls

    def __call__(self, x):
        self._calls.append(len(x))
        return self._model(x)

    def __getattr__(self, name):
        return getattr(self._model, name)


def test_the_time_budget_applies_to_data_free_prior_images_on_cpu_or_where_asked():
    """B is sized to DEFAULT_TIME_BUDGET_MINUTES for data-free prior images on CPU in one process; a given `batch_size`,
    public images, rows targets, another input size, a GPU or torchrun keep a fixed B; an explicit budget where it
    cannot size anything is a one-line error."""
    from types import SimpleNamespace

    from dpconvert.errors import DpconvertError
    from dpconvert.methods.dpdfd_options import DEFAULT_TIME_BUDGET_MINUTES, DpdfdOptions, time_budget_minutes

    fmnist, digits = InputSpec(1, 28, 28, 10), InputSpec(1, 8, 8, 10)
    plain, public = SimpleNamespace(public_data=None, device="cpu"), SimpleNamespace(public_data="pub.npz", device="cpu")
    assert time_budget_minutes(plain, DpdfdOptions(), fmnist) == DEFAULT_TIME_BUDGET_MINUTES
    assert time_budget_minutes(plain, DpdfdOptions(), fmnist, distributed=True) is None
    assert time_budget_minutes(SimpleNamespace(public_data=None, device="cuda:0"), DpdfdOptions(), fmnist) is None
    assert time_budget_minutes(plain, DpdfdOptions(batch_size=10_000), fmnist) is None
    assert time_budget_minutes(public, DpdfdOptions(), fmnist) is None and time_budget_minutes(plain, DpdfdOptions(), digits) is None
    assert time_budget_minutes(public, DpdfdOptions(time_budget=5), fmnist) == 5  # asked for: public images' rows too
    assert time_budget_minutes(plain, DpdfdOptions(time_budget=2, prior_images=100), digits) == 2
    with pytest.raises(DpconvertError, match="per-image"):
        time_budget_minutes(plain, DpdfdOptions(time_budget=5), digits)
    with pytest.raises(DpconvertError, match="torchrun"):
        time_budget_minutes(plain, DpdfdOptions(time_budget=5), fmnist, distributed=True)
    with pytest.raises(DpconvertError, match="dpgan"):
        time_budget_minutes(plain, DpdfdOptions(time_budget=5, generator="dpgan"), fmnist)
    with pytest.raises(DpconvertError, match="one of them"):
        DpdfdOptions(time_budget=5, batch_size=1000)
    with pytest.raises(DpconvertError, match="minutes"):
        DpdfdOptions(time_budget=0)


def test_rows_for_a_budget_grow_with_the_teachers_speed_and_leave_the_students_time():
    """Queries and teacher scale with B, the student's passes over per-image targets do not; B is the largest grid step
    that fits (independent arithmetic on a made-up estimate)."""
    from dpconvert.methods import dpdfd_options as o

    est = {"queries_seconds": 30.0, "teacher_seconds": 570.0, "student_seconds": 300.0}  # 200 µs per row at B = 3 M
    fits = (o.BUDGET_SHARE * 60 * 25.0 - 300.0) / 200e-6  # 5.25 M rows fit into 25 minutes
    assert fits == pytest.approx(5_250_000)
    assert o.rows_for_budget(est, 25.0, 3_000_000) == 5_000_000 == max(r for r in o.BUDGET_ROWS_GRID if r <= fits)
    twice_as_fast = {**est, "queries_seconds": 15.0, "teacher_seconds": 285.0}
    assert o.rows_for_budget(twice_as_fast, 25.0, 3_000_000) == 10_000_000  # 10.5 M fit
    assert o.rows_for_budget(est, 1.0, 3_000_000) == o.BUDGET_ROWS_GRID[0] == 100_000  # less than the student's time
    assert not o.budget_fits(est, 1.0, 3_000_000, 100_000) and o.budget_fits(est, 25.0, 3_000_000, 5_250_000)
    slow = {**est, "teacher_seconds": 3_000_000 / 220}  # a 3×64×64 ResNet-34 on 2 cores: ~220 rows/s
    assert o.rows_for_budget(slow, 25.0, 3_000_000) == 200_000  # (1 350 − 300) s at ~220 rows/s: ≈ 230 000 rows fit
    assert o.rows_for_budget({**slow, "teacher_seconds": 3_000_000 / 245}, 25.0, 3_000_000) == 250_000  # ≈ 257 000 fit
    assert o.rows_for_budget({**est, "teacher_seconds": 0.0, "queries_seconds": 0.0}, 25.0, 3_000_000) == o.BUDGET_ROWS_GRID[-1]
    assert all(b / a <= 4 / 3 for a, b in zip(o.BUDGET_ROWS_GRID, o.BUDGET_ROWS_GRID[1:]))  # no step loses more than a quarter
    assert o.rows_for_budget({**est, "teacher_seconds": 0.0, "queries_seconds": 0.0}, 25.0, 3_000_000, most=4_500_000) == 4_000_000  # memory


def test_a_time_budget_sizes_b_from_the_measured_speed_and_the_card_and_plan_say_so(tmp_path, monkeypatch):
    """`time_budget`: B is what the timed phases fit (on a patched grid here: the product's steps are millions of rows),
    the plan the run reports carries it and says how to repeat it, the card's mechanism records B and that it was timed,
    and the audit recomputes ε from it."""
    import json

    import dpconvert
    from dpconvert.methods import dpdfd_options as o

    monkeypatch.setattr(o, "BUDGET_ROWS_GRID", (2_000, 3_000, 6_000))
    plans = []
    r = dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", eps=1, epochs=1, prior_images=50, time_budget=60.0,
                          on_plan=plans.append)
    card = json.loads(r.card_json.read_text())
    m = card["mechanism"]
    assert m["batch_size"] == 6_000 and m["device_defaults"]["batch_size_timed"] is True  # an hour fits the upper bound
    assert plans[-1].batch_size == 6_000 and plans[-1].rows_sized
    given = dpconvert.plan(eps=1.0, input_size=(1, 8, 8), batch_size=6_000, prior_images=50)  # as if B had been given
    assert (plans[-1].sigma, plans[-1].delta) == (given.sigma, given.delta) == (m["sigma"], card["guarantee"]["delta"])
    assert any("60-minute budget" in n and "`batch_size` 6000" in n for n in plans[-1].notes())
    assert [a.passed for a in dpconvert.audit([str(r.out)])] == [True]
    plans.clear()
    r = dpconvert.convert("builtin:digits", out=tmp_path / "t.onnx", eps=1, epochs=1, prior_images=50, time_budget=1e-4, on_plan=plans.append)
    assert json.loads(r.card_json.read_text())["mechanism"]["batch_size"] == 2_000  # no time at all: the first step …
    assert plans[-1].over_budget and any("take longer than 0.0001 minutes" in n for n in plans[-1].notes())  # … and the plan says so


def test_the_plan_without_a_teacher_says_convert_will_size_b():
    import dpconvert
    from dpconvert.methods.dpdfd_options import DATA_FREE_PER_IMAGE_BATCH, DEFAULT_TIME_BUDGET_MINUTES

    plan = dpconvert.plan(eps=1.0, input_size=(1, 28, 28))
    assert plan.time_budget == DEFAULT_TIME_BUDGET_MINUTES and not plan.rows_sized and plan.batch_size == DATA_FREE_PER_IMAGE_BATCH
    assert any("convert sizes B" in n for n in plan.notes())
    assert dpconvert.plan(eps=1.0, input_size=(1, 8, 8)).time_budget is None


def test_a_release_larger_than_half_the_memory_is_refused_before_anything_is_drawn():
    from dpconvert.errors import DpconvertError
    from dpconvert.methods.dpdfd_options import check_release_memory, release_rows_that_fit

    spec = InputSpec(1, 28, 28, 10)
    fit = release_rows_that_fit(spec, 7)
    check_release_memory(fit, spec, 7)
    with pytest.raises(DpconvertError, match=f"give `batch_size` {fit:,} or less"):
        check_release_memory(fit + 1, spec, 7)
    assert release_rows_that_fit(spec, 784) < fit  # images held as pixels, not as z
