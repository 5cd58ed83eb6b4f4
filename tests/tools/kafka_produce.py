#!/usr/bin/env python3
"""Produce N messages to a Kafka topic with confluent-kafka (another client
than the librdkafka C producer the other tests use), for test_kafka.c's
python_producer_bytes_identical.

usage: kafka_produce.py BOOTSTRAP TOPIC N OUT

Message i: partition i % 4, key str(i), header label = str(i % 7), value =
numpy-generated random bytes (0..20000 bytes, some empty).  OUT gets what
was produced, per message: u32 id, u32 length, the bytes (little-endian),
so the consumer's bytes are compared with the producer's, not with a
regeneration.  Exits 77 when confluent_kafka is not importable.
"""
import struct
import sys

try:
    import confluent_kafka
except ImportError:
    sys.exit(77)
import numpy as np


def main():
    boot, topic, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    rng = np.random.default_rng(20261124)
    p = confluent_kafka.Producer({"bootstrap.servers": boot, "linger.ms": 5})
    errors = []

    def done(err, msg):
        if err is not None:
            errors.append(str(err))

    with open(out, "wb") as f:
        for i in range(n):
            size = 0 if i % 17 == 0 else int(rng.integers(1, 20000))
            value = rng.integers(0, 256, size=size, dtype=np.uint8).tobytes()
            p.produce(topic, value=value, key=str(i), partition=i % 4,
                      headers=[("label", str(i % 7).encode())], on_delivery=done)
            p.poll(0)
            f.write(struct.pack("<II", i, len(value)) + value)
    left = p.flush(30)
    if left or errors:
        print(f"kafka_produce: {left} unflushed, errors {errors[:3]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
