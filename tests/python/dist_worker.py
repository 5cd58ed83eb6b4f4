"""One rank of the distributed tests (launched by test_distributed.py).

usage: dist_worker.py MODE SOURCE OUT_JSON [RANK WORLD PORT]
  MODE torch: join a gloo group over tcp:// (RANK/WORLD_SIZE are NOT in the
              environment, so the loader must take them from torch.distributed),
              all-gather every rank's sample indices and check them on rank 0.
  MODE env:   no process group; the loader reads RANK/WORLD_SIZE (or SLURM_*)
              from the environment.  The parent checks the JSON files.
  MODE elastic-save (issue 28): gloo group; epoch 1, batch 16; after 3 steps
              a barrier and rank 0 writes OUT_JSON (its state_dict and every
              rank's indices so far) as a checkpoint would, then 2 more steps,
              a marker file OUT_JSON.rankR.ready, and sleep until killed.
  MODE elastic-resume: gloo group of another size, batch 10; every rank loads
              the checkpoint's state (path in argv[7]) and runs the rest of
              epoch 1; rank 0 writes every rank's indices, batch count and
              a sha256 of each sample's pixels.
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
    elif mode.startswith("elastic"):
        elastic(mode, source, out)
        return
    else:
        loader = chute.Loader(source, batch_size=16, size=16, drop_last=False, seed=7,
                              return_indices=True, workers=1)
        result = {"rank": loader.rank, "world": loader.world_size, "len": len(loader),
                  "from": loader.distributed_source, "indices": epoch_indices(loader, 0)}
    with open(out, "w") as f:
        json.dump(result, f)


def elastic(mode, source, out):
    import hashlib
    import os
    import time

    import torch.distributed as dist

    rank, world, port = (int(v) for v in sys.argv[4:7])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    kw = dict(size=16, seed=7, return_indices=True, workers=1)
    if mode == "elastic-save":
        loader = chute.Loader(source, batch_size=16, **kw)
        loader.set_epoch(1)
        mine = []
        for step, (_, _, idx) in enumerate(loader, 1):
            mine.extend(int(i) for i in idx)
            if step == 3:  # the checkpoint, at a lockstep point
                gathered = [None] * world
                dist.all_gather_object(gathered, mine)
                if rank == 0:
                    with open(out + ".tmp", "w") as f:
                        json.dump({"state": loader.state_dict(), "seen": gathered}, f)
                    os.rename(out + ".tmp", out)
                dist.barrier()
            if step == 5:
                break
        open("%s.rank%d.ready" % (out, rank), "w").close()
        while True:  # the job dies here (SIGKILL from the test)
            time.sleep(1)
    with open(sys.argv[7]) as f:
        ckpt = json.load(f)
    loader = chute.Loader(source, batch_size=10, **kw)
    assert (loader.rank, loader.world_size) == (rank, world)
    loader.load_state_dict(ckpt["state"])
    loader.set_epoch(ckpt["state"]["epoch"])
    mine, nb, pixels = [], 0, {}
    for images, _, idx in loader:
        mine.extend(int(i) for i in idx)
        for img, i in zip(images, idx.tolist()):
            pixels[int(i)] = hashlib.sha256(img.contiguous().numpy().tobytes()).hexdigest()
        nb += 1
    gathered = [None] * world
    dist.all_gather_object(gathered, {"indices": mine, "batches": nb, "pixels": pixels})
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"ranks": gathered, "seen": ckpt["seen"]}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
