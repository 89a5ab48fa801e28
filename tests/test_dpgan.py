"""The DP-critic GAN query source: the critic is the only path from private data to the generator, the composed ε
against independent numbers, and an end-to-end Private-kNN run on its queries that the audit recomputes."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from dpconvert.accounting import DpganPknnAccountant
from dpconvert.generators import create_generator
from dpconvert.io.spec import InputSpec
from dpconvert.mechanisms.dp_gan import DpGanTraining

SPEC = InputSpec(1, 8, 8, 10, mean=(0.3,), std=(0.4,))


def _training(cls=DpGanTraining):
    torch.manual_seed(0)
    from dpconvert.accounting import DpganAccountant

    return cls(create_generator("dcgan_small", SPEC, nz=16), SPEC, sigma=1.0, clip=1.0, sampling_rate=0.5, steps=1, fake_batch=16, lr=1e-2,
               accountant=DpganAccountant(), noise=torch.Generator().manual_seed(1), train_rng=torch.Generator().manual_seed(2))


def _generator_after_one_step(x, y, critic_state, cls=DpGanTraining):
    """One step whose critic update is replaced by a fixed (already noisy) critic state: what the generator learns then
    may depend on that state and its own randomness, never on (x, y)."""
    t = _training(cls)

    def fixed_critic_step(critic, opt, xr, yr):
        t.critic.load_state_dict(critic_state)
        t.seen_real = xr  # available to a (leaky) generator step, as real code would have it
        return 0.0
    t._critic_step = fixed_critic_step
    return [p.detach().clone() for p in t.fit(x, y).parameters()]


class LeakyTraining(DpGanTraining):
    """A generator step that also pulls towards the real lot's mean (feature matching on raw data): must be caught."""

    def _generator_step(self, critic, opt):
        xf, yf = self.fake(self.fake_batch)
        loss = F.binary_cross_entropy_with_logits(self.critic(xf, yf), torch.ones(len(xf))) + (xf.mean(0) - self.seen_real.mean(0)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss.detach())


@pytest.mark.parametrize("cls,leaks", [(DpGanTraining, False), (LeakyTraining, True)])
def test_the_critic_is_the_only_path_from_private_data_to_the_generator(cls, leaks):
    state = {k: v + 0.1 for k, v in _training().critic.state_dict().items()}
    x_a, y_a = torch.randn(64, *SPEC.shape), torch.randint(0, 10, (64,))
    x_b, y_b = x_a + 5.0, y_a.flip(0)  # every record changed: the generator's update must not move at all
    same = all(torch.equal(a, b) for a, b in zip(_generator_after_one_step(x_a, y_a, state, cls), _generator_after_one_step(x_b, y_b, state, cls)))
    assert same is not leaks


def test_every_critic_step_is_recorded_with_what_it_used():
    t = _training()
    t.steps = 5
    t.fit(torch.randn(40, *SPEC.shape), torch.randint(0, 10, (40,)))
    ev = t.accountant.state_dict()["events"]
    assert ev == [{"mechanism": "subsampled_gaussian", "params": {"sigma": 1.0, "clip": 1.0, "sampling_rate": 0.5}, "count": 5}]


def test_composed_epsilon_matches_an_independent_composition():
    """The joint RDP bound against Opacus' RDP analysis of the critic plus the Private-kNN curve, converted by
    Opacus; the basic bound against the parts at δ/2."""
    import numpy as np
    from opacus.accountants.analysis import rdp as opacus_rdp

    from dpconvert.accounting import pknn

    acc = DpganPknnAccountant()
    acc.record("subsampled_gaussian", sigma=1.2, clip=1.0, sampling_rate=0.02, count=400)
    acc.record("pknn_screening", k=300, num_classes=10, sigma1=50.0, threshold=120.0, sampling_rate=0.1, count=5000)
    acc.record("pknn_argmax", sigma2=40.0, sampling_rate=0.1, count=3000)
    gan, labels = acc.parts()
    orders = np.asarray(pknn.RDP_ORDERS, dtype=float)
    critic = opacus_rdp.compute_rdp(q=0.02, noise_multiplier=1.2, steps=400, orders=orders)
    independent, _ = opacus_rdp.get_privacy_spent(orders=orders, rdp=critic + labels.rdp(), delta=1e-5)
    got = acc.epsilons(delta=1e-5)
    assert got["rdp_joint"] == pytest.approx(independent, rel=0.02)
    assert got["basic_composition_half_delta_each"] == pytest.approx(gan.epsilon(delta=5e-6) + labels.epsilon(delta=5e-6))
    assert got["epsilon"] == min(got["rdp_joint"], got["basic_composition_half_delta_each"])


@pytest.mark.slow
def test_pknn_on_dpgan_queries_end_to_end(tmp_path, cli):
    from dpconvert.auditing.card_checks import check_card

    out = tmp_path / "g.onnx"
    code, _, err = cli("convert", "builtin:digits", "--method", "pknn", "--private-data", "builtin:digits:train", "--query-generator", "dpgan",
                       "--gan-critic", "dpsgd", "--gan-steps", "20", "--gan-sampling-rate", "0.1", "--k", "40", "--sampling-rate", "0.3", "--sigma1", "20",
                       "--epochs", "2", "--queries", "300", "--eps", "4", "--out", out)
    assert code == 0, err
    data = json.loads(out.with_name("g.onnx.card.json").read_text())
    assert data["guarantee"]["scope"] == "record" and data["guarantee"]["epsilon"] <= 4.0
    assert data["accounting"]["accountant"] == "pknn+dpgan"
    assert check_card(data)[1] == []
    forged = json.loads(json.dumps(data))
    forged["mechanism"]["query_generator"]["dpgan"]["sigma"] *= 3
    assert any(w == "mechanism.query_generator.dpgan.sigma" for w, _ in check_card(forged)[1])
    forged = json.loads(json.dumps(data))
    forged["accounting"]["state"]["events"] = [e for e in forged["accounting"]["state"]["events"] if e["mechanism"] != "subsampled_gaussian"]
    assert check_card(forged)[1]


@pytest.mark.slow
def test_synth_writes_data_card_and_grid(tmp_path, cli):
    from PIL import Image

    from dpconvert.auditing.card_checks import check_card as check_data_card

    out = tmp_path / "synthetic.npz"
    code, _, err = cli("synth", "--private-data", "builtin:digits:train", "--out", out, "--input-size", "1,8,8", "--num-classes", "10",
                       "--eps", "4", "--gan-generator-steps", "10", "--samples", "200", "--grid", tmp_path / "grid.png")
    assert code == 0, err
    import numpy as np

    data = np.load(out)
    assert data["x"].shape == (200, 1, 8, 8) and data["x"].dtype == np.uint8 and np.bincount(data["y"]).tolist() == [20] * 10
    card = json.loads(out.with_name("synthetic.npz.card.json").read_text())
    assert card["guarantee"]["scope"] == "record" and card["guarantee"]["epsilon"] <= 4.0
    assert "expected_privacy_loss" not in json.dumps(card["guarantee"])  # an ex-post estimate is never the guarantee
    assert check_data_card(card)[1] == []
    forged = json.loads(json.dumps(card))
    assert card["mechanism"]["critic"] == "embedding" and card["mechanism"]["steps"] == 1
    forged["mechanism"]["steps"] = 2
    assert any(w == "mechanism.steps" for w, _ in check_data_card(forged)[1])
    grid = Image.open(tmp_path / "grid.png")
    assert grid.size[1] >= 10 * 8  # one row of samples per class


def test_synth_refuses_a_bad_output_name(tmp_path, cli):
    code, _, err = cli("synth", "--private-data", "builtin:digits:train", "--out", tmp_path / "x.csv", "--input-size", "1,8,8", "--num-classes", "10")
    assert code == 1 and "--out" in err and not list(tmp_path.iterdir())


def test_synthetic_labels_are_the_classes_the_images_were_drawn_for():
    """The released y must be the class each image was generated for (a separate draw of labels would pair images
    with random classes and make the data set useless while looking fine)."""
    import torch

    from dpconvert.generators.saved import sample_labelled

    class Painter(torch.nn.Module):  # a conditional generator whose image is its class
        nz, num_classes = 4, 10

        def forward(self, z, labels):
            return labels.float().view(-1, 1, 1, 1).expand(-1, 1, 8, 8)

    x, y = sample_labelled(Painter(), 300, 10, torch.Generator().manual_seed(0), batch=64)
    assert torch.equal(x[:, 0, 0, 0].long(), y) and torch.bincount(y).tolist() == [30] * 10


@pytest.mark.slow
def test_synthetic_data_teaches_the_real_classes(tmp_path):
    """End to end at a large ε: a nearest-class-mean classifier fitted on the synthetic set beats chance by far on
    real digits (mismatched labels give ~10 %)."""
    import numpy as np

    from dpconvert.io.data import digits_split
    from dpconvert.methods.dpgan import GanOptions
    from dpconvert.synth import synthesize

    synthesize("builtin:digits:train", out=tmp_path / "s.npz", input_size=(1, 8, 8), num_classes=10, eps=50, samples=300, seed=0,
               gan=GanOptions(generator_steps=150))
    data = np.load(tmp_path / "s.npz")
    x, y = data["x"].reshape(len(data["x"]), -1) / 255.0, data["y"]
    centres = np.stack([x[y == c].mean(0) for c in range(10)])
    real = digits_split("test")
    rx = real.pixels.reshape(len(real), -1)
    acc = float((np.argmin(((rx[:, None] - centres[None]) ** 2).sum(2), 1) == real.labels).mean())
    assert acc > 0.5, acc
