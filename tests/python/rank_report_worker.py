"""One rank of test_rank_report.py: a gloo group over tcp://, one epoch with
rank-dependent read delay, then Loader.rank_report() on every rank.

usage: rank_report_worker.py SOURCE OUT_JSON RANK WORLD PORT DELAY_US [LOGDIR]
Writes its own stats() (taken after the epoch, before the report) and the
report, plus what rank_report wrote to a recording writer; with LOGDIR the
loader has tensorboard=LOGDIR (every 1000 batches: only the report's
scalars) and no writer is passed.
"""
import json
import sys
import time

import chute


class RecordingWriter:
    def __init__(self):
        self.calls = []

    def add_scalar(self, tag, value, global_step=None):
        self.calls.append([tag, float(value), global_step])


def main():
    import torch.distributed as dist

    source, out = sys.argv[1:3]
    rank, world, port, delay = (int(v) for v in sys.argv[3:7])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    logdir = sys.argv[7] if len(sys.argv) > 7 else None
    ld = chute.Loader(source, batch_size=5, size=16, workers=1, readahead=0, shuffle=False,
                      read_delay_us=delay, tensorboard=logdir, tensorboard_every=1000)
    for _ in ld:
        time.sleep(0.002)  # the "model"
    mine = ld.stats()
    w = RecordingWriter()
    rep = ld.rank_report(writer=None if logdir else w)
    ld.close()  # the event file's last records are written
    with open(out, "w") as f:
        json.dump({"rank": rank, "stats": mine, "report": rep, "written": w.calls}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
