"""saturate.transforms render to the engine's option strings."""

import pytest
import torch

from saturate import transforms as T


def test_torchvision_names_render_to_engine_options():
    spec = T.field_spec("image", [T.RandomResizedCrop(224, scale=(0.25, 1)), T.RandomHorizontalFlip(),
                                  T.ToDtype(torch.float16), T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
    assert spec.startswith("image:crop=random,size=224,area=0.25..1.0,")
    assert "flip=0.5" in spec and "dtype=float16" in spec and "mean=0.485/0.456/0.406" in spec


def test_no_flip_unless_asked():
    assert T.field_spec("image", [T.Resize(256), T.CenterCrop((200, 100))]) == \
        "image:crop=center,resize=256,crop=center,size=200x100,flip=0"


def test_strings_pass_through_and_bad_values_are_refused():
    assert T.field_spec("tokens", "max-length=16") == "tokens:max-length=16"
    with pytest.raises(TypeError):
        T.Compose([lambda x: x])
    with pytest.raises(ValueError):
        T.Resize((256, 256))
