"""Per-field transforms with torchvision's names and semantics.

They run in C++, on the loader's threads, while each sample is decoded; here
they only describe what to do. A field's transform is a :class:`Compose` (or a
list) of these, or the option string the CLI takes (``saturate bench feed
--help``), e.g. ``"crop=random,size=224,flip=0.5"``.

Images always go crop -> flip -> dtype -> normalize, whatever the listed order.
Unlike torchvision, no flip happens unless :class:`RandomHorizontalFlip` is listed.

Example (ImageNet training and evaluation)::

    from saturate import transforms as T
    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                       T.ToDtype("float32"), T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
    val = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToDtype("float32"),
                     T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
"""

from __future__ import annotations

from typing import Iterable, Sequence, Union

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _size(size: Union[int, Sequence[int]]) -> str:
    if isinstance(size, int):
        return str(size)
    h, w = size
    return f"{int(h)}x{int(w)}"


def _values(v: Union[float, Sequence[float]]) -> str:
    if isinstance(v, (int, float)):
        return repr(float(v))
    return "/".join(repr(float(x)) for x in v)


def _dtype_name(dtype) -> str:
    # Accepts "float32", numpy dtypes and torch dtypes (str(torch.float32) == "torch.float32").
    name = getattr(dtype, "name", None) or str(dtype)
    return name.split(".")[-1]


class Transform:
    """One step; ``options()`` gives its part of the engine's option string."""

    def options(self) -> list[str]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({','.join(self.options())})"


class RandomResizedCrop(Transform):
    """torchvision.transforms.RandomResizedCrop: a random area/aspect crop, resized to ``size``."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
        self.size, self.scale, self.ratio = size, scale, ratio

    def options(self):
        return [
            "crop=random",
            f"size={_size(self.size)}",
            f"area={float(self.scale[0])!r}..{float(self.scale[1])!r}",
            f"ratio={float(self.ratio[0])!r}..{float(self.ratio[1])!r}",
        ]


class Resize(Transform):
    """torchvision.transforms.Resize(int): shorter side to ``size``; pair it with CenterCrop."""

    def __init__(self, size: int):
        if not isinstance(size, int):
            raise ValueError("Resize: only an int (the shorter side) is supported")
        self.size = size

    def options(self):
        return ["crop=center", f"resize={self.size}"]


class CenterCrop(Transform):
    """torchvision.transforms.CenterCrop: the central ``size`` crop (after Resize, if given)."""

    def __init__(self, size):
        self.size = size

    def options(self):
        return ["crop=center", f"size={_size(self.size)}"]


class RandomHorizontalFlip(Transform):
    """torchvision.transforms.RandomHorizontalFlip(p)."""

    def __init__(self, p: float = 0.5):
        self.p = p

    def options(self):
        return [f"flip={float(self.p)!r}"]


class ToDtype(Transform):
    """torchvision.transforms.v2.ToDtype(dtype, scale=True): images become x / 255.

    Arrays (e.g. Fashion-MNIST's uint8[28, 28]) become ``x * scale`` in float, with
    ``scale`` 1/255 when True and 1 when False.
    """

    def __init__(self, dtype="float32", scale: Union[bool, float] = True):
        self.dtype, self.scale = _dtype_name(dtype), scale

    def options(self):
        if self.dtype == "uint8":
            return ["dtype=uint8"]
        scale = 1.0 / 255.0 if self.scale is True else (1.0 if self.scale is False else self.scale)
        return [f"dtype={self.dtype}", "to-float", f"scale={float(scale)!r}"]


class Normalize(Transform):
    """torchvision.transforms.Normalize(mean, std) on floats: (x - mean) / std per channel."""

    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def options(self):
        return ["normalize", f"mean={_values(self.mean)}", f"std={_values(self.std)}"]


class ToLayout(Transform):
    """Image memory layout: "chw" (default, like torchvision), "hwc" ([B, H, W, C]) or
    "channels_last": [B, C, H, W] tensors with HWC memory, as
    ``x.to(memory_format=torch.channels_last)`` gives, for channels_last models.
    """

    def __init__(self, layout: str):
        self.layout = layout.lower()
        if self.layout not in ("chw", "hwc", "channels_last"):
            raise ValueError(f"ToLayout: {layout!r} (use chw, hwc or channels_last)")

    def options(self):
        return [f"layout={self.layout}"]


class Pad(Transform):
    """Variable-length arrays: pad to the batch's longest with ``value``; a
    ``<field>_lengths`` tensor comes with it. ``max_length`` bounds a sample."""

    def __init__(self, max_length: int, value: int = 0, truncate: bool = False):
        self.max_length, self.value, self.truncate = max_length, value, truncate

    def options(self):
        opts = [f"max-length={int(self.max_length)}", f"pad={int(self.value)}"]
        return opts + (["truncate"] if self.truncate else [])


class Compose(Transform):
    """torchvision.transforms.Compose: the steps for one field."""

    def __init__(self, transforms: Iterable[Transform]):
        self.transforms = list(transforms)
        for t in self.transforms:
            if not isinstance(t, Transform):
                raise TypeError(f"Compose: {t!r} is not a saturate transform")

    def options(self):
        opts = [o for t in self.transforms for o in t.options()]
        if not any(isinstance(t, RandomHorizontalFlip) for t in self.transforms):
            opts.append("flip=0")  # the engine's default flips; torchvision's does not
        return opts


def field_spec(field: str, transform) -> str:
    """The engine's "FIELD:OPTION,..." string for a field's transform."""
    if isinstance(transform, str):
        return f"{field}:{transform}"
    if isinstance(transform, (list, tuple)):
        transform = Compose(transform)
    elif isinstance(transform, Transform) and not isinstance(transform, Compose):
        transform = Compose([transform])
    if not isinstance(transform, Transform):
        raise TypeError(
            f"transforms[{field!r}]: expected a saturate transform, a list of them or an "
            f"option string, got {type(transform).__name__}"
        )
    return f"{field}:{','.join(transform.options())}"
