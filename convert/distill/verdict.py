"""What a data-free run can say about its own student, from quantities that are already public: an honest verdict.

A data-free student is only as good as the queries' coverage of the teacher's classes: on a real CIFAR-10 model
the random-field prior gets 68 % of its answers in one class ("automobile"), and the student, however long it
trains, learns that one class. The verdict looks at two things, both post-processing of the DP release (no teacher
answer is read again, so nothing here costs ε):

* **class coverage**: the trained student's top class on fresh draws of the data-free query source (the student is
  the released model; the queries are nobody's data), before the logit adjustment, which evens out the classes on
  exactly these queries whatever the targets said. A class counts as covered when it gets at least
  1/(5K) of them; at most half of the K classes covered means the queries rarely showed the teacher the rest, so
  the student cannot know them. (The digits default covers 8 of 10 on every seed and scores 89–94 %: classes that
  are rare among the queries can still be learned; half is where the published CIFAR-10 model's students were weak.)
* **noise per target**: each target the student learns from averages A released rows of norm C with noise σC per
  coordinate, so its noise-to-signal power is at least K·σ²/A (one row at σ = 3.73, K = 10: 139). This is a number
  for the card, not a pass/fail: many noisy rows of similar inputs still teach a student (the digits default).

The verdict says "weak" or "no sign of weakness" — never that the student is good: only evaluation data can say
that (``--eval-data``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

COVERED_SHARE = 0.2  # a class is covered when it gets ≥ COVERED_SHARE / K of the student's answers
WEAK_COVERAGE = 0.5  # at most this share of the classes covered: weak
VERDICT_QUERIES = 4096  # fresh draws of the query source the student answers


@dataclass(frozen=True)
class Verdict:
    classes_covered: int
    num_classes: int
    largest_class_share: float  # the share of the student's answers in its most frequent class
    queries: int  # fresh draws of the data-free query source the student answered
    answers_per_target: float  # released rows averaged into each target the student learns from
    target_noise_to_signal: float  # lower bound K·σ²/A (0 without noise)
    weak: bool
    note: str

    def to_dict(self) -> dict:
        return asdict(self)


def judge(class_counts: list[int], *, sigma: float, answers_per_target: float, num_classes: Optional[int] = None) -> Verdict:
    """The verdict for a student whose top classes on fresh data-free queries were ``class_counts`` (one count per class)."""
    k = num_classes or len(class_counts)
    n = sum(class_counts)
    covered = sum(c >= COVERED_SHARE * n / k for c in class_counts)
    largest = max(class_counts) / n if n else 0.0
    nsr = k * sigma ** 2 / max(answers_per_target, 1e-12)
    weak = covered <= WEAK_COVERAGE * k
    if weak:
        note = (f"expect a weak student: its answers on fresh queries cover {covered} of {k} classes ({largest:.0%} in one), "
                "so the queries rarely showed the teacher the rest; give unlabelled in-domain images with `public_data` or "
                "another `prior`")
    else:
        note = (f"the student's answers on fresh queries cover {covered} of {k} classes (largest {largest:.0%}): no sign of a "
                "weak student; only real images can show a good one (`eval_data`)")
    return Verdict(covered, k, round(largest, 4), n, round(answers_per_target, 2), round(nsr, 4), weak, note)


def student_verdict(job, rounds, sigma: float) -> Verdict:
    """:func:`judge` for a finished DPDFD run (the engine ``job`` and its ``rounds``): its student on fresh draws of its
    own data-free query source (the query stream is left as it was), and the released rows averaged into each of its
    targets."""
    import torch

    from dpconvert.distill.models import batched

    x = job.probe_inputs(VERDICT_QUERIES)
    was_training = job.student.training
    job.student.eval()
    try:
        with torch.no_grad():
            logits = batched(job.model, x, job.chunk).float().cpu()
    finally:
        job.student.train(was_training)
    shift = rounds.query_prior_shift  # undo the logit adjustment: it evens out the classes on these very
    top = (logits + (shift.float().cpu() if shift is not None else 0)).argmax(1)  # queries whatever the targets said
    k = job.num_classes
    counts = torch.bincount(top, minlength=k).tolist()
    targets = rounds.source_targets
    per_target = float(targets.counts[targets.counts > 0].float().mean()) if targets is not None and bool((targets.counts > 0).any()) else 1.0
    return judge(counts, sigma=sigma, answers_per_target=per_target, num_classes=k)
