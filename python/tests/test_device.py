"""device="cuda": batches in GPU memory. CPU-runnable checks here always run;
tests marked gpu run where torch sees a GPU (bench/gpu/run.sh)."""

import pytest
import torch

import saturate
from saturate import errors
from saturate import transforms as T

CROP = [T.RandomResizedCrop(64), T.RandomHorizontalFlip()]
GPU_READY = CROP + [T.ToDtype("float16"), T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD),
                    T.ToLayout("channels_last")]


def epoch(loader):
    return [{k: v.cpu().clone() for k, v in batch.items()} for batch in loader]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_clear_error(photos):
    with pytest.raises(errors.UnavailableError) as e:
        saturate.Loader(photos, 4, transforms={"image": CROP}, device="cuda")
    msg = str(e.value)
    assert "cuda:0" in msg
    assert "no NVIDIA GPU" in msg or "built without CUDA" in msg, msg
    # The CPU path is unaffected.
    assert len(epoch(saturate.Loader(photos, 4, transforms={"image": CROP}, device="cpu"))) == 9


def test_bad_device_names_the_value(photos):
    with pytest.raises(ValueError, match="gpu0"):
        saturate.Loader(photos, 4, device="gpu0")
    with pytest.raises(ValueError, match="numpy"):
        saturate.Loader(photos, 4, device="cuda", framework="numpy")


def test_channels_last_is_chw_values_in_hwc_memory(photos):
    chw = epoch(saturate.Loader(photos, 4, seed=1, transforms={"image": CROP + [T.ToDtype("float32")]}))
    loader = saturate.Loader(photos, 4, seed=1,
                             transforms={"image": CROP + [T.ToDtype("float32"), T.ToLayout("channels_last")]})
    for a, b in zip(chw, loader, strict=True):
        assert b["image"].shape == a["image"].shape == (4, 3, 64, 64)
        assert b["image"].is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(a["image"], b["image"])


def test_bfloat16_rounds_as_torch_does(photos):
    norm = T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)
    f32 = epoch(saturate.Loader(photos, 4, seed=2, transforms={"image": CROP + [T.ToDtype("float32"), norm]}))
    bf16 = epoch(saturate.Loader(photos, 4, seed=2, transforms={"image": CROP + [T.ToDtype("bfloat16"), norm]}))
    for a, b in zip(f32, bf16):
        assert b["image"].dtype == torch.bfloat16
        assert torch.equal(a["image"].to(torch.float32).to(torch.bfloat16), b["image"])


@pytest.mark.gpu
def test_cuda_batches_equal_the_cpu_path(photos):
    cpu = epoch(saturate.Loader(photos, 4, seed=3, transforms={"image": GPU_READY}))
    loader = saturate.Loader(photos, 4, seed=3, transforms={"image": GPU_READY}, device="cuda")
    for want, batch in zip(cpu, loader, strict=True):
        assert batch["image"].is_cuda and batch["label"].is_cuda
        assert batch["image"].is_contiguous(memory_format=torch.channels_last)
        for k in want:
            assert torch.equal(want[k], batch[k].cpu()), k


@pytest.mark.gpu
def test_cuda_batches_are_ready_on_a_side_stream(photos):
    """Batches taken inside torch.cuda.stream(s) are ready on s, which does not wait for
    the default stream; a slow kernel queued first makes a missing wait visible. The
    reference sums are taken on the GPU too, by the same kernel, so they match exactly
    (a GPU sum and a CPU sum of the same 73,728 values differ in the last bits)."""
    cpu = epoch(saturate.Loader(photos, 6, seed=4, transforms={"image": GPU_READY}))
    loader = saturate.Loader(photos, 6, seed=4, transforms={"image": GPU_READY}, device="cuda")
    side = torch.cuda.Stream()
    busy = torch.randn(4096, 4096, device="cuda")
    sums = []
    with torch.cuda.stream(side):
        for batch in loader:
            busy @ busy  # keeps the GPU busy while the next copies are queued
            sums.append(batch["image"].float().sum().item())
    want = [b["image"].cuda().float().sum().item() for b in cpu]
    assert sums == want


@pytest.mark.gpu
def test_cuda_allocates_nothing_per_batch(photos):
    loader = saturate.Loader(photos, 4, transforms={"image": GPU_READY}, device="cuda")
    for _ in loader:
        pass
    torch.cuda.synchronize()
    free_before, _ = torch.cuda.mem_get_info()
    buffers = loader.stats()["device_buffers"]
    for _ in range(3):
        for _ in loader:
            pass
    torch.cuda.synchronize()
    assert torch.cuda.mem_get_info()[0] == free_before
    assert loader.stats()["device_buffers"] == buffers
    assert loader.stats()["h2d_bytes"] > 0


def test_decode_option_is_checked(photos):
    with pytest.raises(ValueError, match="decode"):
        saturate.Loader(photos, 4, decode="nvjpeg")
    with pytest.raises(ValueError, match="device='cuda'"):
        saturate.Loader(photos, 4, decode="gpu")
    # "auto" on the host is the CPU path.
    loader = saturate.Loader(photos, 4, decode="auto", transforms={"image": CROP})
    assert len(epoch(loader)) == 9
    assert loader.stats()["decode"] == "cpu"
    assert loader.stats()["gpu_decoded"] == 0


def _nvjpeg_or_skip(photos):
    try:
        return saturate.Loader(photos, 4, seed=5, transforms={"image": CROP}, device="cuda",
                               decode="gpu")
    except errors.UnavailableError as e:
        if "nvJPEG" in str(e) or "nvjpeg" in str(e):
            pytest.skip(f"no nvJPEG: {e}")
        raise


@pytest.mark.gpu
def test_gpu_decode_gives_the_cpu_paths_samples_with_bounded_pixel_differences(photos):
    # Same seed: same samples, labels, crops and flips; pixels differ by the
    # decoders' IDCT/upsampling and the CPU path's DCT-scaled decode (docs/gpu.md).
    cpu = epoch(saturate.Loader(photos, 4, seed=5, transforms={"image": CROP}))
    loader = _nvjpeg_or_skip(photos)
    gpu = epoch(loader)
    assert len(gpu) == len(cpu)
    # These test images are synthetic worst cases (modular ramps that wrap from 255 to 0, plus
    # noise): chroma upsampling differs at every wrap, so the share of large differences is
    # bounded rather than the maximum; a wrong crop, flip or row moves the mean by tens.
    total, n, large, worst = 0.0, 0, 0, 0
    for a, b in zip(cpu, gpu, strict=True):
        assert torch.equal(a["label"], b["label"])
        assert a["image"].shape == b["image"].shape
        d = (a["image"].to(torch.int16) - b["image"].to(torch.int16)).abs()
        total += float(d.sum())
        n += d.numel()
        large += int((d > 48).sum())
        worst = max(worst, int(d.max()))
    stats = loader.stats()
    print(f"decode=gpu ({stats['decode_backend']}): mean abs diff {total / n:.3f}, "
          f"share > 48: {large / n:.4f}, max {worst}")
    assert total / n <= 3.0
    assert large / n <= 0.02
    assert stats["decode"] == "gpu"
    assert stats["gpu_decoded"] + stats["gpu_decode_fallbacks"] >= 33
    assert stats["gpu_decode_fraction"] == 1.0
    # saturate.pack restart-marks JPEGs: most reach nvJPEG cut around their crop.
    assert stats["gpu_decode_cut"] > 0


@pytest.mark.gpu
def test_gpu_decode_auto_shows_its_split(photos):
    _nvjpeg_or_skip(photos)
    loader = saturate.Loader(photos, 4, seed=5, transforms={"image": GPU_READY}, device="cuda",
                             decode="auto")
    cpu = epoch(saturate.Loader(photos, 4, seed=5, transforms={"image": GPU_READY}))
    got = epoch(loader)
    for a, b in zip(cpu, got, strict=True):
        assert torch.equal(a["label"], b["label"])
    stats = loader.stats()
    assert stats["decode"] == "auto"
    assert 0.0 < stats["gpu_decode_fraction"] < 1.0
