"""saturate and torch in one process on a GPU, whichever comes first (issue 25).

An H200 run aborted `examples/train_resnet18_photos.py` with glibc's `free(): invalid pointer`
when saturate was imported before torch and its CUDA loader was made before torch had touched
CUDA; the same loader ran fine the other way round. The module exported libstdc++'s inline
code, which a newer libstdc++ loaded as its dependency bound to (docs/gpu.md); it now exports
only its init (test_wheel.py checks that without a GPU). Each case runs in a fresh interpreter
(import order is per process), pulls a few batches onto the GPU, and runs a torchvision
model on them, as the example does.
"""

import pytest

from conftest import run_python

CHILD = r"""
import sys
order, when, data = sys.argv[1:4]
if order == "saturate-first":
    import saturate
    from saturate import transforms as T
    import torch, torchvision
else:
    import torch, torchvision
    import saturate
    from saturate import transforms as T
if when == "after-torch-cuda":
    torch.zeros(1, device="cuda")  # torch creates its CUDA context first
loader = saturate.Loader(data, 8, shuffle=True, seed=0, device="cuda", transforms={"image": [
    T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToDtype("float16"),
    T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD), T.ToLayout("channels_last")]})
model = torchvision.models.resnet18(num_classes=3).cuda().to(memory_format=torch.channels_last)
batches = 0
for epoch in range(2):
    loader.set_epoch(epoch)
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"])
        loss.backward()
        batches += 1
torch.cuda.synchronize()
print("batches", batches, "classes", len(loader.class_names))
"""


@pytest.mark.gpu
@pytest.mark.parametrize("order", ["saturate-first", "torch-first"])
@pytest.mark.parametrize("when", ["before-torch-cuda", "after-torch-cuda"])
def test_cuda_loader_in_either_import_order(photos, order, when):
    r = run_python(["-X", "faulthandler", "-c", CHILD, order, when, str(photos)], timeout=180)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert "free(): invalid pointer" not in r.stderr
    assert r.stdout.split() == ["batches", "10", "classes", "3"], r.stdout  # 5 per epoch (36 / 8)
