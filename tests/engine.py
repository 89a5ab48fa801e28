"""The DPDFD engine's settings for tests that drive the engine directly."""

from __future__ import annotations


def engine_config(**settings):
    """``DpdfdConfig`` as a default conversion of a 28×28 teacher on a CPU sets it (the options' defaults, resolved by
    ``engine_option_settings``), with ``settings`` changed."""
    from dpconvert.distill.config import DpdfdConfig
    from dpconvert.io.spec import InputSpec
    from dpconvert.methods.dpdfd_options import DpdfdOptions, engine_option_settings

    return DpdfdConfig(**{**engine_option_settings(DpdfdOptions(), InputSpec(1, 28, 28, 10)), **settings})


def released_once(job):
    """The rounds over engine ``job`` after one release kept (no student training yet)."""
    from dpconvert.distill.rounds import DpdfdRounds

    done = DpdfdRounds(job)
    rows, targets, _ = job.release(1)
    done.keep(rows, targets)
    return done


def run_rounds(job, **kw):
    """Every round of engine ``job`` (the kernel's releases and the training on them); returns the rounds."""
    from dpconvert.distill.rounds import DpdfdRounds

    return DpdfdRounds(job).run(**kw)
