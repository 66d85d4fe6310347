"""saturate: keep GPUs busy while models train.

    import saturate
    from saturate import transforms as T

    saturate.pack("photos/train", "data/train.sat")          # once, offline
    loader = saturate.Loader("data/train.sat", batch_size=64,
                             transforms={"image": [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]})
    for batch in loader:                                      # dict of torch tensors, zero-copy
        with saturate.phase("forward"):                       # spans, when tracing is on
            ...
        saturate.step()

See README.md and docs/python.md.
"""

from . import errors, transforms
from .errors import Error
from .loader import Loader
from .checkpoint import Checkpointer
from . import dist_checkpoint
from .dist_checkpoint import DistCheckpointer
from ._pack import pack, verify
from ._watch import watch
from . import _trace as trace
from ._trace import phase, step
from ._batch import find_batch_size

__version__ = "0.1.0"
__all__ = [
    "Loader",
    "Checkpointer",
    "DistCheckpointer",
    "dist_checkpoint",
    "pack",
    "verify",
    "watch",
    "trace",
    "phase",
    "step",
    "find_batch_size",
    "transforms",
    "errors",
    "Error",
    "__version__",
]
