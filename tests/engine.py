"""The DPDFD engine's settings for tests that drive the engine directly."""

from __future__ import annotations


def engine_config(**settings):
    """``DpdfdConfig`` as a default conversion of a 28×28 teacher on a CPU sets it (the options' defaults, resolved by
    ``engine_option_settings``), with ``settings`` changed."""
    from dpconvert.distill.config import DpdfdConfig
    from dpconvert.io.spec import InputSpec
    from dpconvert.methods.dpdfd_options import DpdfdOptions, engine_option_settings

    return DpdfdConfig(**{**engine_option_settings(DpdfdOptions(), InputSpec(1, 28, 28, 10)), **settings})
