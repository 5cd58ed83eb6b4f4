"""Kafka streams from Python (issue #13): chute.Loader("kafka://...").

The peer is librdkafka's mock cluster, made by a confluent-kafka producer
(``test.mock.num.brokers``); its bootstrap address is read from the
cluster's metadata.  CHUTE_TEST_KAFKA_BROKERS=host:port runs the same tests
against that broker (topics made with the admin API).  Message values are the JPEGs of the webdataset-written
tars in tests/fixtures/fields/wds (read with Python's tarfile), message i =
image i % 6 with header label=i, partition i % 4; the pixel reference is
the same images read through the "wds" dataset with the same options.
"""
import base64
import gc
import json
import os
import tarfile
import time

import numpy as np
import pytest

import chute

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "fields", "wds")
NPART = 4

kafka = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.skipif(not chute.features()["kafka"],
                                reason="libchute built without librdkafka")


def _images():
    out = []
    for n in ("fields-000000.tar", "fields-000001.tar"):
        with tarfile.open(os.path.join(FIX, n)) as t:
            for m in t.getmembers():
                if m.name.endswith(".jpg"):
                    out.append(t.extractfile(m).read())
    assert len(out) == 6
    return out


def _reference():
    with chute.Loader(FIX, batch_size=6, size=24, dtype="uint8", transform="eval",
                      shuffle=False, return_indices=True) as ld:
        (x, y, i), = list(ld)
        return {int(i[k]): np.asarray(x[k]).copy() for k in range(6)}


REAL = os.environ.get("CHUTE_TEST_KAFKA_BROKERS")  # a real broker, else the mock


@pytest.fixture(scope="module")
def cluster():
    if REAL:
        p = kafka.Producer({"bootstrap.servers": REAL, "linger.ms": 5})
        yield p, REAL
        return
    p = kafka.Producer({"test.mock.num.brokers": 3, "linger.ms": 5})
    md = p.list_topics(timeout=10)
    boot = ",".join("%s:%d" % (b.host, b.port) for b in md.brokers.values())
    yield p, boot


def _topic(cluster, n):
    p = cluster[0]
    name = "chute-py-%d-%d" % (os.getpid(), time.monotonic_ns())
    # The mock cluster creates a topic on its first metadata request, with
    # 4 partitions (rdkafka_mock.c's default); a real broker through the
    # admin API.
    if REAL:
        from confluent_kafka.admin import AdminClient, NewTopic
        AdminClient({"bootstrap.servers": REAL}).create_topics(
            [NewTopic(name, NPART, 1)])[name].result(30)
    md = p.list_topics(name, timeout=10)
    assert len(md.topics[name].partitions) == NPART
    imgs = _images()
    for i in range(n):
        p.produce(name, value=imgs[i % 6], partition=i % NPART, headers=[("label", str(i))])
    assert p.flush(20) == 0  # every message acknowledged before anyone consumes
    return name


def _uri(boot, topic, group):
    return ("kafka://%s/%s?group=%s&assign=ranks&until=eof&label_header=label"
            "&kafka.session.timeout.ms=6000" % (boot, topic, group))


def _loader(uri):
    return chute.Loader(uri, batch_size=4, size=24, dtype="uint8", transform="eval",
                        shuffle=False, workers=2)


def test_kafka_loader_resumes_from_state_dict_after_exactly_what_was_released(cluster):
    ref = _reference()
    n = 40
    topic = _topic(cluster, n)
    boot = cluster[1]
    seen = []
    ld = _loader(_uri(boot, topic, "g1-%d" % time.monotonic_ns()))
    assert ld.dataset.is_stream
    for k, (x, y) in enumerate(ld):
        for j in range(len(y)):
            assert np.array_equal(np.asarray(x[j]), ref[int(y[j]) % 6])
            seen.append(int(y[j]))
        del x, y
        if k == 2:
            break
    gc.collect()  # the tensors gone: their batches released
    state = json.loads(json.dumps(ld.state_dict()))  # JSON-friendly
    assert state["stream_state"]
    base64.b64decode(state["stream_state"], validate=True)
    ld.close()
    assert len(seen) == 12
    # A fresh group: only the state says where to resume.
    ld2 = _loader(_uri(boot, topic, "g2-%d" % time.monotonic_ns()))
    ld2.load_state_dict(state)
    rest = []
    for x, y in ld2:
        for j in range(len(y)):
            assert np.array_equal(np.asarray(x[j]), ref[int(y[j]) % 6])
            rest.append(int(y[j]))
    ld2.close()
    assert sorted(seen + rest) == list(range(n))


def test_kafka_state_refused_by_a_non_kafka_loader(cluster):
    ld = _loader(_uri(cluster[1], _topic(cluster, 4), "g3-%d" % time.monotonic_ns()))
    state = ld.state_dict()
    ld.close()
    with chute.Loader(FIX, batch_size=4, size=24, shuffle=False) as other:
        st = other.state_dict()
        st["stream_state"] = state["stream_state"] or "AAAA"
        with pytest.raises(ValueError, match="Kafka"):
            other.load_state_dict(st)



def test_kafka_uri_without_a_group_fails_naming_it():
    """The consumer opens when the epoch starts; its error reaches Python."""
    with chute.Loader("kafka://127.0.0.1:9/topic?until=eof&kafka.sasl.password=hunter2",
                      batch_size=2, size=8) as ld:
        assert ld.dataset.is_stream
        with pytest.raises(chute.ChuteError, match="consumer group") as e:
            list(ld)
        assert "hunter2" not in str(e.value)

