"""The HTML zoo report: one table row per model, plots inline, and it renders in a real browser (when one is installed)."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

CRAFTED = Path(__file__).parent / "fixtures" / "crafted_cards"


class _Rows(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows, self.in_body, self.svgs, self.scripts = 0, False, 0, 0

    def handle_starttag(self, tag, attrs):
        self.in_body |= tag == "tbody"
        self.rows += tag == "tr" and self.in_body
        self.svgs += tag == "svg"
        self.scripts += tag == "script" and any(k == "src" for k, _ in attrs)  # nothing fetched

    def handle_endtag(self, tag):
        self.in_body &= tag != "tbody"


@pytest.fixture(scope="module")
def zoo_report(tmp_path_factory):
    from tests.conftest import main_exit_code

    d = tmp_path_factory.mktemp("zoo")
    zoo = d / "zoo"
    shutil.copytree(CRAFTED, zoo, ignore=shutil.ignore_patterns("expected.json"))
    import json

    card = json.loads((zoo / "dpdfd_genuine.card.json").read_text())  # one card with utility: the page draws its point
    card["utility"] = {"evaluation_data": "digits", "examples": 450, "teacher_accuracy": 0.99, "student_accuracy": 0.9, "agreement": 0.9,
                       "covered_by_guarantee": False, "note": "test"}
    (zoo / "dpdfd_genuine.card.json").write_text(json.dumps(card))
    main_exit_code(["audit", zoo, "--html", d / "report.html", "--allow-seeded-noise"])  # forged cards fail: exit 1, report written
    return d / "report.html", len(list(zoo.glob("*.card.json")))


@pytest.mark.slow
def test_report_has_one_row_per_model_and_inline_plots(zoo_report):
    path, models = zoo_report
    p = _Rows()
    p.feed(path.read_text())
    assert p.rows == models and p.scripts == 0
    assert "FAIL" in path.read_text() and "pass" in path.read_text()


def test_report_plots_utility_and_membership_when_cards_have_them():
    from dpconvert.auditing.audit import Check, ModelAudit
    from dpconvert.auditing.report import html_report

    attack = {"attack": "lira_ref_online", "auc": 0.51, "tpr_at_0.1%_fpr": 0.002, "tpr_at_1%_fpr": 0.012}
    models = [ModelAudit("a.onnx", epsilon=1.0, recomputed_epsilon=1.0, delta=1e-5, scope="record", record_level_epsilon=1.0,
                         checks=[Check("card present", True)], accuracy=0.88, membership={"model": attack}),
              ModelAudit("b.onnx", epsilon=8.0, recomputed_epsilon=8.0, delta=1e-5, scope="query", record_level_epsilon=90.0,
                         checks=[Check("policy max ε", False, "ε=8 > 2")], accuracy=0.91)]
    page = html_report(models, {"max_eps": 2.0})
    p = _Rows()
    p.feed(page)
    assert p.rows == 2 and p.svgs == 2 and "ε=8 &gt; 2" in page


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium not installed (Debian: apt-get install chromium)")
def test_report_renders_in_headless_chromium(zoo_report, tmp_path):
    from PIL import Image

    path, models = zoo_report
    flags = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(flags + ["--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120).stdout
    p = _Rows()
    p.feed(dom)
    assert p.rows == models  # the browser built the table (after the page's script ran)
    assert "privacy vs utility" in dom and "dpdfd_genuine" in dom.split("<svg", 1)[1]  # the plot, its title and its point's label
    shot = tmp_path / "shot.png"
    subprocess.run(flags + [f"--screenshot={shot}", path.as_uri()], capture_output=True, timeout=120)
    img = Image.open(shot).convert("L")
    dark = sum(1 for v in img.crop((0, 0, 700, 400)).getdata() if v < 100)
    assert dark > 2000  # text and table borders drawn in the top-left, where the table is
