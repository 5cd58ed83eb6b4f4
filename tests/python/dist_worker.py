"""One rank of the distributed tests (launched by test_distributed.py).

usage: dist_worker.py MODE SOURCE OUT_JSON [RANK WORLD PORT]
  MODE torch: join a gloo group over tcp:// (RANK/WORLD_SIZE are NOT in the
              environment, so the loader must take them from torch.distributed),
              all-gather every rank's sample indices and check them on rank 0.
  MODE env:   no process group; the loader reads RANK/WORLD_SIZE (or SLURM_*)
              from the environment.  The parent checks the JSON files.
"""
import json
import sys

import chute


def epoch_indices(loader, epoch):
    loader.set_epoch(epoch)
    out = []
    for _, _, idx in loader:
        out.extend(int(i) for i in idx)
    return out


def main():
    mode, source, out = sys.argv[1:4]
    result = {}
    if mode == "torch":
        import torch.distributed as dist

        rank, world, port = (int(v) for v in sys.argv[4:7])
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=world)
        loader = chute.Loader(source, batch_size=16, size=16, drop_last=False, seed=7,
                              return_indices=True, workers=1)
        assert loader.distributed_source == "torch.distributed", loader.distributed_source
        assert (loader.rank, loader.world_size) == (rank, world)
        per_epoch = []
        for epoch in (0, 1):
            mine = epoch_indices(loader, epoch)
            gathered = [None] * world
            dist.all_gather_object(gathered, {"rank": rank, "indices": mine, "len": len(loader)})
            per_epoch.append(gathered)
        result = {"rank": rank, "epochs": per_epoch}
        dist.barrier()
        dist.destroy_process_group()
    else:
        loader = chute.Loader(source, batch_size=16, size=16, drop_last=False, seed=7,
                              return_indices=True, workers=1)
        result = {"rank": loader.rank, "world": loader.world_size, "len": len(loader),
                  "from": loader.distributed_source, "indices": epoch_indices(loader, 0)}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
