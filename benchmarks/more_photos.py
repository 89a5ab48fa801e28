"""A candidate for the design simulation (``data_free_sim.py --import more_photos --prior natural_crops``): the
natural-crop prior over its seven photographs plus the ten further photographs and textures scikit-image ships as
files (a motorcycle, a cameraman, coins, the moon, the Hubble deep field, a stained tissue slide, a retina, grass,
gravel, brick). It widens ``generators.natural_images.IMAGES`` for this process only; the product is unchanged.

    python benchmarks/data_free_sim.py --import more_photos --teacher benchmarks/runs/cifar10_published.pt \\
        --input-size 3,32,32 --mean 0,0,0 --std S,S,S --eval-data benchmarks/runs/natural_eval.npz \\
        --prior natural_crops --images 2000 --rows 8e5 --denoise none --eps 1,inf --cache /tmp/sim_more_photos
"""

from __future__ import annotations

import os

import numpy as np
from PIL import Image

from dpconvert.generators import natural_images

FILES = ("motorcycle_left.png", "camera.png", "coins.png", "moon.png", "hubble_deep_field.jpg", "ihc.png", "retina.jpg",
         "grass.png", "gravel.png", "brick.png")
_read_bundled = natural_images._read


def _read(image):
    if image.package != "scikit-image file":
        return _read_bundled(image)
    import skimage

    return np.asarray(Image.open(os.path.join(os.path.dirname(skimage.__file__), "data", image.name)).convert("RGB"))


natural_images.IMAGES = natural_images.IMAGES + tuple(natural_images.NaturalImage(f, "scikit-image file", "see scikit-image's data/README")
                                                      for f in FILES)
natural_images._read = _read
natural_images.image_pyramids.cache_clear()
