"""Writes the TFRecord test files of example_test (README.md) with a reference writer.

usage: make_files.py tfrecord_package.tfrecord   (needs the tfrecord package)
       make_files.py tensorflow.tfrecord         (needs tensorflow or tensorflow-cpu)
"""
import os
import sys


def rows():
    for i in range(6):
        yield {
            "image/encoded": bytes([0xFF, 0xD8]) + bytes(range(i * 40 % 256)) * 3,
            "image/class/label": [1, -7, 2**40, 0, 999, -(2**63)][i],
            "image/class/synset": f"n{i:08d}".encode(),
            "image/object/bbox/xmin": [0.25 * i] * (i % 3),
            "image/object/ids": list(range(-i, i)),
            "image/height": 100 + i,
        }


def main():
    path = sys.argv[1]
    if os.path.basename(path).startswith("tfrecord_package"):
        from tfrecord import TFRecordWriter

        kinds = {"image/class/label": "int", "image/object/ids": "int", "image/height": "int",
                 "image/object/bbox/xmin": "float"}
        w = TFRecordWriter(path)
        for row in rows():
            w.write({k: (v, kinds.get(k, "byte")) for k, v in row.items()})
        w.close()
        return
    import tensorflow as tf

    def feature(k, v):
        v = v if isinstance(v, list) else [v]
        if k == "image/object/bbox/xmin":
            return tf.train.Feature(float_list=tf.train.FloatList(value=v))
        if v and isinstance(v[0], bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))

    with tf.io.TFRecordWriter(path) as w:
        for row in rows():
            features = tf.train.Features(feature={k: feature(k, v) for k, v in row.items()})
            w.write(tf.train.Example(features=features).SerializeToString())


if __name__ == "__main__":
    main()
