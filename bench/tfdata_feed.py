"""tf.data's RRC-224 feed of TFRecord files of tf.Example: the baseline of bench/formats_feed.sh.

The public ImageNet input pipeline, as TensorFlow users write it (the TPU/Keras ResNet
preprocessing): TFRecordDataset -> shuffle -> map(parse_single_example, a random crop window from
sample_distorted_bounding_box, decode_and_crop_jpeg, resize to 224x224, uint8) with
num_parallel_calls=AUTOTUNE -> batch 64 -> prefetch(AUTOTUNE). Reads `image/encoded` and
`image/class/label`. TensorFlow runs on THREADS cores (its private thread pool and op pools).

usage: tfdata_feed.py PATTERN THREADS BATCHES [WARMUP] [--antialias] [--decode-full]
  --antialias    resize with tf.image.resize(antialias=True): the same antialiased (area-weighted)
                 downscale that saturate and torchvision's RandomResizedCrop do; without it,
                 TensorFlow's default bilinear, which samples 2x2 source pixels per output pixel
  --decode-full  tf.io.decode_jpeg of the whole image, then tf.slice of the crop window (the
                 Inception/slim preprocessing, and the `decode_jpeg` + resize pipeline issue 23
                 names); without it, the fused decode_and_crop_jpeg, which decodes only down to
                 the window's last row and converts only its columns (the faster of the two)
Prints one JSON line: {"mode": ..., "images_per_s": ..., "cpu_ms_per_image": ...} (the process's
CPU time over the timed batches, all threads, per image). Benchmark only (TensorFlow is not a
saturate dependency): run it with a Python that has tensorflow or tensorflow-cpu.
"""

import glob
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402


FLAGS = ("--antialias", "--decode-full")
ANTIALIAS = "--antialias" in sys.argv[1:]
DECODE_FULL = "--decode-full" in sys.argv[1:]


def rrc_224(record):
    features = tf.io.parse_single_example(
        record,
        {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    encoded = features["image/encoded"]
    # RandomResizedCrop: area 8-100%, aspect 3/4-4/3 (torchvision's and saturate's ranges).
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        tf.io.extract_jpeg_shape(encoded),
        bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, [1, 1, 4]),
        min_object_covered=0.1,
        aspect_ratio_range=(3 / 4, 4 / 3),
        area_range=(0.08, 1.0),
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    y, x, _ = tf.unstack(begin)
    h, w, _ = tf.unstack(size)
    if DECODE_FULL:
        image = tf.slice(tf.io.decode_jpeg(encoded, channels=3), begin, size)
    else:
        image = tf.io.decode_and_crop_jpeg(encoded, tf.stack([y, x, h, w]), channels=3)
    image = tf.image.resize(image, [224, 224], method="bilinear", antialias=ANTIALIAS)
    return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8), features["image/class/label"]


def main():
    args = [a for a in sys.argv[1:] if a not in FLAGS]
    pattern, threads, batches = args[0], int(args[1]), int(args[2])
    warmup = int(args[3]) if len(args) > 3 else 5
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    files = sorted(glob.glob(pattern))
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    ds = (
        tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
        .shuffle(256)
        .repeat()
        .map(rrc_224, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(64, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(options)
    )
    it = iter(ds)
    for _ in range(warmup):  # thread pools started, AUTOTUNE settled in
        next(it)
    n, start, cpu = 0, time.perf_counter(), time.process_time()  # all of the process's threads
    for _ in range(batches):
        x, _ = next(it)
        n += int(x.shape[0])
    rate = n / (time.perf_counter() - start)
    cpu_ms = (time.process_time() - cpu) * 1e3 / n
    mode = "tf.data (AUTOTUNE)" + (", decode_jpeg + slice" if DECODE_FULL else "")
    mode += ", antialias" if ANTIALIAS else ""
    print(json.dumps({"mode": mode, "images_per_s": rate, "cpu_ms_per_image": cpu_ms}))


if __name__ == "__main__":
    main()
