"""What the pipeline builds once per conversion and hands to the method it runs.

A method gets the run's options, the DP noise stream (secret unless `seeded_noise`; its card fields and warning
travel with it), named seed streams (``seeds.py``), the process world (torchrun) and the private training data as a
handle only the privacy kernel opens. It no longer makes any of them itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .distributed import World, current_world
from .mechanisms.noise import NoiseStream, noise_stream
from .mechanisms.private_records import PrivateRecords
from .options import RunOptions
from .seeds import stream


@dataclass
class RunContext:
    run: RunOptions
    noise: NoiseStream
    private: Optional[PrivateRecords]
    world: World

    @classmethod
    def build(cls, run: RunOptions, spec, world: Optional[World] = None) -> "RunContext":
        private = PrivateRecords(run.private_data, spec, run.data_format()) if run.private_data else None
        return cls(run, noise_stream(run.seed, seeded=run.seeded_noise), private, world or current_world())

    def noise_for(self, stream: str) -> NoiseStream:
        """A second mechanism's own noise stream (the DP-critic GAN beside Private-kNN's labels): secret, or under
        `seeded_noise` the named seed stream."""
        return noise_stream(self.run.seed, seeded=self.run.seeded_noise, stream=stream)

    def stream(self, name: str):
        """A fresh generator for the named seed stream (``seeds.STREAMS``)."""
        return stream(name, self.run.seed)
