"""One table of seed streams (convert/seeds.py): no two streams of a run, nor of the DPDFD run that trains Private-kNN's
query generator inside it, replay each other."""

from dpconvert.seeds import STREAMS, SUB_RUN_SHIFT, seed_of, stream


def test_every_stream_has_its_own_offset_and_a_sub_run_meets_none_of_them():
    offsets = list(STREAMS.values())
    assert len(set(offsets)) == len(offsets)
    assert not {o + SUB_RUN_SHIFT for o in offsets} & set(offsets)  # the in-run generator's streams sit above the run's
    assert max(offsets) < SUB_RUN_SHIFT


def test_streams_are_fresh_generators_from_seed_plus_offset():
    a, b = stream("canaries", 7), stream("canaries", 7)
    assert seed_of("canaries", 7) == 7 + STREAMS["canaries"] and a.initial_seed() == b.initial_seed() == seed_of("canaries", 7)
    assert stream("dpgan", 7).initial_seed() != stream("dpgan_noise", 7).initial_seed()  # the GAN's noise is not its training stream
