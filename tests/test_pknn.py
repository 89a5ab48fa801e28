"""Private-kNN: true Poisson subsampling, noise scales as on the card, end to end through the CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

from dpconvert.accounting import ACCOUNTANTS, PknnAccountant
from dpconvert.mechanisms.private_knn import PknnMechanism
from dpconvert.io.spec import InputSpec
from dpconvert.zoo_cards import PrivacyCard


def _mech(n=2000, k=50, gamma=0.3, sigma1=8.0, threshold=40.0, sigma2=6.0, labels=None, seed=0):
    labels = torch.zeros(n, dtype=torch.long) if labels is None else labels
    return PknnMechanism(labels, 10, k=k, sampling_rate=gamma, sigma1=sigma1, threshold=threshold, sigma2=sigma2,
                         accountant=PknnAccountant(), generator=torch.Generator().manual_seed(seed))


def test_subsampling_is_poisson():
    """Kept counts per query ~ Binomial(n, γ) (not a fixed-size subset), independent across queries."""
    m = _mech(n=5000, gamma=0.3)
    mask = m.poisson_mask(400, 5000)
    kept = mask.sum(1).double()
    mean, var = 5000 * 0.3, 5000 * 0.3 * 0.7
    assert abs(kept.mean().item() - mean) < 4 * math.sqrt(var / 400)
    assert kept.var().item() == pytest.approx(var, rel=0.25)  # a fixed-size sample would have variance 0
    assert kept.unique().numel() > 20
    per_record = mask.double().mean(0)  # each record kept with probability γ
    assert abs(per_record.mean().item() - 0.3) < 0.01
    overlap = (mask[0] & mask[1]).double().mean().item()
    assert overlap == pytest.approx(0.09, abs=0.02)  # independent masks: γ²


def test_screening_noise_matches_sigma1():
    """All private labels equal → max vote = k exactly; acceptance rate must be Φ((k − T)/σ1)."""
    n, k, sigma1, thr = 2000, 50, 8.0, 55.0
    m = _mech(n=n, k=k, sigma1=sigma1, threshold=thr)
    pfeats = torch.randn(n, 4)
    q = torch.randn(4000, 4)
    rate = m.screen(q, pfeats).double().mean().item()
    expected = norm.sf((thr - k) / sigma1)
    assert rate == pytest.approx(expected, abs=4 * math.sqrt(expected * (1 - expected) / 4000))
    (ev,) = m.accountant.events
    assert ev.mechanism == "pknn_screening" and ev.count == 4000
    assert ev.params["sigma1"] == sigma1 and ev.params["threshold"] == thr and ev.params["sampling_rate"] == 0.3


def test_argmax_noise_matches_sigma2():
    """Two classes, votes exactly (k, 0): P[argmax wrong] = P[N(0,2σ2²) > k] summed over the 9 other classes."""
    n, k, sigma2 = 2000, 10, 6.0
    m = _mech(n=n, k=k, sigma2=sigma2)
    labels = m.answer(torch.randn(6000, 4), torch.randn(n, 4))
    wrong = (labels != 0).double().mean().item()
    # P[correct] = ∫ φ(z) Φ((k + σ2 z)/σ2)^9 dz
    z = np.linspace(-8, 8, 4001)
    p_correct = np.trapezoid(norm.pdf(z) * norm.cdf((k + sigma2 * z) / sigma2) ** 9, z)
    assert wrong == pytest.approx(1 - p_correct, abs=4 * math.sqrt(p_correct * (1 - p_correct) / 6000))
    assert m.accountant.events[-1].params["sigma2"] == sigma2


def test_noisy_histogram_noise_and_targets():
    """The released histogram is votes + N(0, σ2²) on every class, one accountant event; targets are post-processing of it."""
    from dpconvert.mechanisms.private_knn import histogram_targets

    n, k, sigma2 = 2000, 10, 6.0
    m = _mech(n=n, k=k, sigma2=sigma2)
    noisy = m.noisy_histogram(torch.randn(3000, 4), torch.randn(n, 4))
    resid = noisy - torch.tensor([k] + [0] * 9, dtype=torch.float)  # all labels 0 and ≥ k kept: votes are exactly (k, 0, …)
    assert resid.mean().abs() < 0.05 and resid.std().item() == pytest.approx(sigma2, rel=0.02)
    (ev,) = m.accountant.events
    assert ev.mechanism == "pknn_argmax" and ev.count == 3000 and ev.params["sigma2"] == sigma2
    hard = histogram_targets(noisy, "hard", 1.0, sigma2)
    soft = histogram_targets(noisy, "soft", 1.0, sigma2)
    assert torch.equal(hard.argmax(1), noisy.argmax(1)) and torch.equal(hard.sum(1), torch.ones(3000))
    assert torch.equal(soft.argmax(1), noisy.argmax(1)) and torch.allclose(soft.sum(1), torch.ones(3000))
    assert torch.allclose(soft, torch.softmax(noisy / sigma2, 1))
    with pytest.raises(ValueError, match="hard or soft"):
        histogram_targets(noisy, "fuzzy", 1.0, sigma2)


def test_fewer_kept_than_k_votes_only_real_neighbours():
    m = _mech(n=20, k=50, gamma=0.5)
    counts = m.votes(torch.randn(30, 3), torch.randn(20, 3))
    assert (counts.sum(1) <= 20).all()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from conftest import main_exit_code

    out = tmp_path_factory.mktemp("pknn") / "student.onnx"
    assert main_exit_code(["builtin:digits", "--method", "pknn", "--private-data", "builtin:digits:train", "--public-data", "builtin:digits",
                           "--eps", "8", "--delta", "1e-4", "--k", "40", "--sampling-rate", "0.3", "--sigma1", "20", "--epochs", "3",
                           "--out", out]) == 0
    return out


def test_tiny_run_card_is_recomputed(tiny_run, cli):
    card = PrivacyCard.read(f"{tiny_run}.card.json").data
    assert card["guarantee"]["scope"] == "record" and card["guarantee"]["epsilon"] <= 8
    mech = card["mechanism"]
    acc = ACCOUNTANTS.get("pknn")().load_state_dict(card["accounting"]["state"])
    assert acc.count("pknn_screening") == mech["queries_asked"] == 450
    assert acc.count("pknn_argmax") == mech["queries_answered"]
    assert acc.epsilon(delta=1e-4) == pytest.approx(card["guarantee"]["epsilon"], rel=1e-9)
    for e in acc.events:
        assert e.params["sampling_rate"] == mech["sampling_rate"]
        assert e.params.get("sigma1", mech["sigma1"]) == mech["sigma1"]
        assert e.params.get("sigma2", mech["sigma2"]) == mech["sigma2"]
    code, _, _ = cli("audit", tiny_run, "--require-scope", "record", "--max-eps", "8")
    assert code == 0


@pytest.mark.parametrize("extra,needle", [
    (["--private-data", "{d}/nolabels.npz"], "labels are required"),
    (["--public-data", "{d}/empty.npz"], "public set is empty"),
    (["--method", "pknn", "--private-data", "builtin:digits:train", "--public-data", ""], "--public-data"),
])
def test_bad_pknn_inputs(tmp_path, cli, extra, needle):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "nolabels.npz", x=rng.random((50, 8, 8)))
    np.savez(tmp_path / "fewclasses.npz", x=rng.random((60, 8, 8)), y=np.arange(60) % 3)
    np.savez(tmp_path / "empty.npz", x=np.zeros((0, 8, 8)))
    base = {"--method": "pknn", "--private-data": "builtin:digits:train", "--public-data": "builtin:digits"}
    args = dict(base)
    extra = [a.format(d=tmp_path) for a in extra]
    flags = []
    i = 0
    while i < len(extra):
        if extra[i] in args:
            args[extra[i]] = extra[i + 1]
        else:
            flags += extra[i : i + 2]
        i += 2
    argv = ["builtin:digits", "--eps", "8", "--delta", "1e-4", "--k", "40", "--sampling-rate", "0.3", "--sigma1", "20",
            "--out", tmp_path / "s.onnx", *flags]
    for key, val in args.items():
        if val:
            argv += [key, val]
    code, _, err = cli(*argv)
    assert code == 1 and needle in err, err
    assert not (tmp_path / "s.onnx").exists()


# --- canary audit (Steinke, Nasr, Jagielski 2023) -------------------------------------------

def test_canary_bound_closed_form_and_monotone():
    import math

    from dpconvert.auditing.canaries import epsilon_lower_bound, p_value

    # δ = 0 and every guess right: P[Bin(r, q) ≥ r] = q^r = β  ⇒  ε = log(q / (1 − q)), q = β^(1/r)
    q = 0.05 ** (1 / 100)
    assert epsilon_lower_bound(1000, 100, 100, 0.0, 0.05) == pytest.approx(math.log(q / (1 - q)), rel=1e-6)
    assert epsilon_lower_bound(1000, 200, 100, 1e-5) == 0.0  # coin-flip guesses prove nothing
    bounds = [epsilon_lower_bound(1000, 200, v, 1e-5) for v in (120, 140, 160, 180, 200)]
    assert bounds == sorted(bounds) and bounds[0] > 0
    assert p_value(1000, 200, 150, 0.5, 1e-5) > p_value(1000, 200, 150, 0.5, 0.0)  # δ only loosens


def test_canary_audit_detects_a_leaky_mechanism():
    """A mechanism that publishes its inclusion bits plus small noise must be caught (the audit can fail)."""
    import numpy as np

    from dpconvert.auditing.canaries import audit_scores

    rng = np.random.default_rng(0)
    bits = rng.random(1000) < 0.5
    leaky = audit_scores(bits + 0.3 * rng.standard_normal(1000), bits, delta=1e-5)
    assert leaky.epsilon_lower_bound > 2.0
    blind = audit_scores(rng.standard_normal(1000), bits, delta=1e-5)
    assert blind.epsilon_lower_bound < 0.5


def test_canary_run_bound_below_card_eps(tmp_path, cli):
    out = tmp_path / "canary.onnx"
    code, stdout, stderr = cli("builtin:digits", "--method", "pknn", "--private-data", "builtin:digits:train", "--public-data", "builtin:digits",
                               "--eps", "8", "--delta", "1e-4", "--k", "40", "--sampling-rate", "0.3", "--sigma1", "20",
                               "--epochs", "2", "--rounds", "1", "--canaries", "200", "--out", out)
    assert code == 0, stderr
    assert "canary audit" in stdout
    card = PrivacyCard.read(f"{out}.card.json").data
    c = card["audit"]["canary"]
    assert c["canaries"] == 200 and 0 <= c["correct"] <= c["guesses"] <= 200
    assert "included" not in c  # only the bound leaves the run
    assert 0 <= c["epsilon_lower_bound"] <= card["guarantee"]["epsilon"]
    code, _, _ = cli("audit", out)
    assert code == 0


def test_canaries_need_pknn(tmp_path, cli):
    code, _, stderr = cli("builtin:digits", "--canaries", "10", "--out", tmp_path / "x.onnx")
    assert code == 2 and "--method pknn" in stderr
    assert not list(tmp_path.iterdir())


def test_hog_pca_is_fitted_on_public_images_only():
    from dpconvert.distill.features import FEATURES
    from dpconvert.io.spec import InputSpec

    spec = InputSpec(1, 28, 28, 10)
    g = torch.Generator().manual_seed(0)
    public = torch.rand(64, 1, 28, 28, generator=g)
    phi = FEATURES.get("hog_pca")(spec, public, dims=16)
    f = phi(torch.rand(5, 1, 28, 28, generator=g))
    assert f.shape == (5, 16) and torch.allclose(f.norm(dim=1), torch.ones(5), atol=1e-5)
    other = FEATURES.get("hog_pca")(spec, torch.rand(64, 1, 28, 28, generator=g), dims=16)
    assert not torch.allclose(phi(public[:3]), other(public[:3]))  # the projection comes from the public set given
    with pytest.raises(ValueError, match="public images"):
        FEATURES.get("hog_pca")(spec, None)
    assert FEATURES.get("hog_pca")(spec, public)(public[:2]).shape == (2, 48)  # default: 48 public principal directions


@pytest.mark.parametrize("oversample", [2.0, 0.3])  # 0.3: too few candidates → the full-mask fallback runs for most queries
def test_faiss_search_is_exact_when_everything_is_kept(oversample):
    pytest.importorskip("faiss")
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 10, (3000,), generator=g)
    pfeats, q = torch.randn(3000, 6, generator=g), torch.randn(200, 6, generator=g)
    exact = _mech(n=3000, k=25, gamma=1.0, labels=labels).votes(q, pfeats)
    m = _mech(n=3000, k=25, gamma=1.0, labels=labels)
    m.knn, m.oversample = "faiss", oversample
    assert torch.equal(m.votes(q, pfeats), exact)


def test_faiss_search_has_the_poisson_distribution():
    """Under γ < 1 the oversampled search (lazy bits + fallback) gives the same vote distribution as the full mask."""
    pytest.importorskip("faiss")
    g = torch.Generator().manual_seed(1)
    n, k, gamma = 2000, 20, 0.2
    labels = torch.randint(0, 10, (n,), generator=g)
    pfeats = torch.randn(n, 5, generator=g)
    q = torch.randn(1, 5, generator=g).repeat(3000, 1)  # one query, many independent subsamples
    exact = _mech(n=n, k=k, gamma=gamma, labels=labels, seed=2).votes(q, pfeats)
    for oversample in (2.0, 1.0):  # 1.0: about half the queries need the fallback
        m = _mech(n=n, k=k, gamma=gamma, labels=labels, seed=3)
        m.knn, m.oversample = "faiss", oversample
        fast = m.votes(q, pfeats)
        assert (fast.sum(1) == k).all()
        se = (exact.var(0) / len(q) + fast.var(0) / len(q)).sqrt() + 1e-9
        assert ((exact.mean(0) - fast.mean(0)).abs() / se).max() < 4.5  # per-class mean votes agree


def test_knn_choice():
    from dpconvert.errors import DpconvertError
    from dpconvert.mechanisms.private_knn import FAISS_MIN_RECORDS, resolve_knn

    assert resolve_knn("auto", 60_000) == "exact" and resolve_knn("exact", FAISS_MIN_RECORDS) == "exact"
    with pytest.raises(DpconvertError, match="auto, exact or faiss"):
        resolve_knn("annoy", 10)
    try:
        import faiss  # noqa: F401
    except ImportError:
        return
    assert resolve_knn("auto", FAISS_MIN_RECORDS) == "faiss"


def test_cli_passes_only_what_was_given_and_names_flags_in_errors(tmp_path, cli):
    """The CLI keeps no copy of the library's defaults: unset options reach the API as absent, and library errors,
    which name parameters, are shown with the CLI's flags."""
    from dpconvert.cli.app import as_flags

    assert as_flags("`batch_size` must be >= 1; `releases` too") == "--batch-size must be >= 1; --steps too"
    code, _, err = cli("builtin:digits", "--batch-size", "0", "--out", tmp_path / "s.onnx")
    assert code == 1 and "--batch-size must be >= 1" in err


DIGITS_SPEC = InputSpec(1, 8, 8, 10, mean=(0.305,), std=(0.376,))  # the built-in teacher's input


@pytest.fixture(scope="module")
def public_backbone(tmp_path_factory):
    """A stand-in for public pretrained weights (the hub is unreachable here): a timm model saved to a local file."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = timm.create_model("resnet10t", pretrained=False)
    path = tmp_path_factory.mktemp("backbone") / "resnet10t.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path, model


def test_timm_backbone_features_use_the_given_weights(public_backbone):
    from dpconvert.distill.features import create_features

    path, model = public_backbone
    spec = DIGITS_SPEC
    phi = create_features(f"timm:resnet10t@{path}", spec)
    x = torch.randn(6, *spec.shape)
    f = phi(x)
    assert f.shape == (6, model.num_features) and torch.allclose(f.norm(dim=1), torch.ones(6), atol=1e-5)
    assert torch.equal(f, phi(x))
    # the same computation by hand with the saved weights: pixels → 3 channels → 64 px → ImageNet normalisation
    model.reset_classifier(0)
    model.eval()
    pixels = (x * torch.tensor(spec.std).view(1, -1, 1, 1) + torch.tensor(spec.mean).view(1, -1, 1, 1)).expand(-1, 3, -1, -1)
    pixels = torch.nn.functional.interpolate(pixels, size=(64, 64), mode="bilinear", align_corners=False)
    mean, std = torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1), torch.tensor((0.229, 0.224, 0.225)).view(1, 3, 1, 1)
    with torch.no_grad():
        ref = torch.nn.functional.normalize(model((pixels - mean) / std), dim=1)
    assert torch.allclose(f, ref, atol=1e-5)


def test_timm_backbone_features_errors(tmp_path):
    from dpconvert.errors import DpconvertError
    from dpconvert.distill.features import create_features

    with pytest.raises(DpconvertError, match="unknown timm model"):
        create_features("timm:resnet_nonexistent", DIGITS_SPEC)
    with pytest.raises(DpconvertError, match="timm:NAME@FILE"):
        create_features(f"timm:resnet10t@{tmp_path / 'missing.safetensors'}", DIGITS_SPEC)


@pytest.mark.slow
def test_pknn_cli_with_a_timm_backbone(public_backbone, tmp_path, cli):
    path, _ = public_backbone
    out = tmp_path / "s.onnx"
    code, _, err = cli("builtin:digits", "--method", "pknn", "--private-data", "builtin:digits:train", "--public-data", "builtin:digits", "--eps", "8",
                       "--delta", "1e-4", "--k", "40", "--sampling-rate", "0.3", "--sigma1", "20", "--epochs", "1", "--rounds", "1",
                       "--features", f"timm:resnet10t@{path}", "--out", out)
    assert code == 0, err
    card = PrivacyCard.read(f"{out}.card.json").data
    assert card["mechanism"]["config"]["features"] == f"timm:resnet10t@{path}" and card["guarantee"]["scope"] == "record"


def test_next_round_features_concatenate_the_first_map():
    from dpconvert.errors import DpconvertError
    from dpconvert.mechanisms.private_knn import next_round_features
    from dpconvert.methods.pknn_options import PknnOptions
    from dpconvert.students import create_student

    student = create_student("datalens_cnn", DIGITS_SPEC).eval()
    first = lambda x: torch.nn.functional.normalize(x.flatten(1), dim=1)  # noqa: E731  (a stand-in first-round map)
    x = torch.randn(5, *DIGITS_SPEC.shape)
    only_student = next_round_features(PknnOptions(round_features="student"), student, first)(x)
    both = next_round_features(PknnOptions(), student, first)(x)
    assert both.shape == (5, 64 + only_student.shape[1]) and torch.allclose(both.norm(dim=1), torch.ones(5), atol=1e-5)
    # the student's part is the student's features, down-weighted by round_features_weight before the joint normalisation
    scale = both[:, 64:].norm(dim=1) / both[:, :64].norm(dim=1)
    assert torch.allclose(scale, torch.full((5,), 0.5), atol=1e-4)
    with pytest.raises(DpconvertError, match="choose one of: student, student\\+first"):
        PknnOptions(round_features="teacher")


def test_class_balance_weights():
    from dpconvert.mechanisms.private_knn import class_balance_weights

    y = torch.tensor([0] * 60 + [1] * 30 + [2] * 10)
    w = class_balance_weights(y, 4)  # class 3 never answered: capped, not infinite
    assert torch.allclose(w[:3], torch.tensor([100 / 240, 100 / 120, 100 / 40])) and w[3] == 5.0
    assert torch.allclose(class_balance_weights(torch.nn.functional.one_hot(y, 4).float(), 4), w)
    assert torch.allclose((w[:3] * torch.tensor([60.0, 30.0, 10.0])), torch.full((3,), 100 / 4))  # each class weighs the same in total
