"""TFRecord records on streams from Python (issue #13): chute.Loader on
``pipe:cat fields.tfrecord`` and on Kafka message values that are framed
tf.train.Examples, with ``format="tfrecord"`` and typed fields declared in
``extra_keys``.  The file was written by TensorFlow's TFRecordWriter and
expected.txt holds what tf.io.parse_single_example read back
(tests/fixtures/make_fixtures.py); images must equal the local tfrecord
dataset's.  Kafka: librdkafka's mock cluster through confluent-kafka, or
the broker named by CHUTE_TEST_KAFKA_BROKERS."""
import os
import struct
import time

import numpy as np
import pytest

import chute

from test_fields import FIX, check, expected

TFR = os.path.join(FIX, "tfr", "fields.tfrecord")
NAMES = ["bbox", "ids", "weight", "meta", "mask.npy"]
DECL = ["bbox:float32[4]", "ids:int64[3]", "weight:float32", "meta:bytes", "mask.npy:uint8[4x4]"]


def _kw(**kw):
    kw.update(batch_size=5, transform="eval", size=16, dtype="uint8", shuffle=False, workers=2,
              fields=NAMES, return_indices=True, as_torch=False)
    return kw


def _reference():
    with chute.Loader(os.path.join(FIX, "tfr"), extra_keys=NAMES, **_kw()) as ld:
        (b,) = list(ld)
        return {int(i): np.asarray(b["images"])[k].copy()
                for k, i in enumerate(np.asarray(b["indices"]))}


def test_pipe_tfrecord_fields_equal_tensorflows():
    ref = _reference()
    with chute.Loader("pipe:cat " + TFR, format="tfrecord", extra_keys=DECL, **_kw()) as ld:
        (b,) = list(ld)
    assert np.asarray(b["indices"]).tolist() == [0, 1, 2, 3, 4]
    assert check(b, expected("tfr")) == 5 * 6
    for k in range(5):
        assert np.array_equal(np.asarray(b["images"])[k], ref[k])
    assert np.asarray(b["mask.npy"]).shape == (5, 4, 4)


def test_stream_extra_keys_need_a_declared_type():
    with pytest.raises(chute.ChuteError, match="item 1"):
        chute.Loader("pipe:cat " + TFR, format="tfrecord", extra_keys=["bbox"], **_kw())


def _records():
    b = open(TFR, "rb").read()
    out, p = [], 0
    while p < len(b):
        (n,) = struct.unpack_from("<Q", b, p)
        out.append(b[p:p + 16 + n])
        p += 16 + n
    return out


def test_kafka_values_that_are_tfrecord_examples():
    kafka = pytest.importorskip("confluent_kafka")
    if not chute.features()["kafka"]:
        pytest.skip("libchute built without librdkafka")
    real = os.environ.get("CHUTE_TEST_KAFKA_BROKERS")
    topic = "chute-py-tfr-%d-%d" % (os.getpid(), time.monotonic_ns())
    if real:
        from confluent_kafka.admin import AdminClient, NewTopic
        p = kafka.Producer({"bootstrap.servers": real})
        AdminClient({"bootstrap.servers": real}).create_topics(
            [NewTopic(topic, 1, 1)])[topic].result(30)
        boot = real
    else:
        p = kafka.Producer({"test.mock.num.brokers": 1})
        md = p.list_topics(topic, timeout=10)  # the mock creates it on first sight
        boot = ",".join("%s:%d" % (x.host, x.port) for x in md.brokers.values())
    for r in _records():
        p.produce(topic, value=r, partition=0)
    assert p.flush(20) == 0
    ref = _reference()
    uri = "kafka://%s/%s?group=g-%d&until=eof" % (boot, topic, time.monotonic_ns())
    with chute.Loader(uri, format="tfrecord", extra_keys=DECL, **_kw()) as ld:
        (b,) = list(ld)
    # Labels are 1..5 in the file (record i has label i + 1): key the check by them.
    labels = np.asarray(b["labels"]).tolist()
    assert sorted(labels) == [1, 2, 3, 4, 5]
    b = dict(b)
    b["indices"] = np.asarray([lab - 1 for lab in labels])
    assert check(b, expected("tfr")) == 5 * 6
    for k, lab in enumerate(labels):
        assert np.array_equal(np.asarray(b["images"])[k], ref[lab - 1])
