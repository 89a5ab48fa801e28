"""The sentences a card states about its guarantee, in one place: what it covers, what it does not, and the warnings
that facts on the card require. Methods write them; ``auditing/card_checks.py`` derives them again from the card's
own facts and fails a card whose statements were edited, dropped or widened. No torch.
"""

from __future__ import annotations

NOT_COVERED = [
    "evaluation numbers computed on private data (the utility block)",
    "the teacher itself and anything released about it outside this card",
    "hyper-parameter choices tuned on private data, if any were",
]
NOT_COVERED_DATA = [
    "the declared size, class count and sample count (public choices)",
    "hyper-parameter choices tuned on private data, if any were",
]
NOT_COVERED_PUBLIC_IMAGES = "the public query images (assumed public; not protected)"
NOT_COVERED_GAN_QUERIES = ("the private records beyond guarantee.queries_record_level_epsilon (the DP-critic GAN that made the queries); "
                           "through the teacher they are covered only by record_level_epsilon")
COVERS_STUDENT = ["the released student model (weights and graph in this file)", "any later use of the student (post-processing)"]
COVERS_STUDENT_AND_LABELS = ["the released student model (weights and graph in this file)", "the DP labels of the queries",
                             "any later use of the student (post-processing)"]
COVERS_DATA = ["the synthetic data set in this file and its sample grid", "any later use of them (post-processing)"]

SEEDED_WARNING = ("the DP noise and subsampling were drawn from a stream seeded with `seed` (`seeded_noise`): anyone who knows the "
                  "seed can regenerate them and subtract the noise, so this ε holds only against an adversary who does not; "
                  "convert without `seeded_noise` for a release")
NO_NOISE_WARNING = "noise multiplier 0: this student is NOT differentially private (ε = ∞); for comparison only"
WEAK_PARITY_PREFIX = "ONNX parity is weak"
EX_POST_WARNING = ("the empirical block (the ex-post expected privacy-loss estimate, `ex_post`) was computed from the private records "
                   "outside the DP accounting: it is not covered by the guarantee, is not differential privacy, and may reveal "
                   "something about those records")
LARGE_DELTA_PREFIX = "δ above the ceiling"
PARITY_MAX_ABS_DIFF = 1e-3
PARITY_MIN_TOP1 = 0.99

# δ is the probability that the guarantee fails outright. Above this ceiling a conversion needs an explicit opt-in
# (`allow_large_delta`), whose card carries a warning, and the audit fails the card unless its policy's `max_delta`
# admits it. 1e-4 is already 6 expected failures for a 60 000-record set; the default is far below it.
DELTA_CEILING = 1e-4
