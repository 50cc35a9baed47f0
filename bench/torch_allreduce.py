#!/usr/bin/env python3
"""dist.all_reduce on CPU float32 tensors through the backends "cc" and "gloo", in one job
(one group each, the same tensors), sizes interleaved: for each size cc's loop then
gloo's, repeated --rounds times. Prints nccl-tests' columns per backend: the mean time of
a call over a loop (median over the rounds), algbw, busbw = algbw * 2(n-1)/n, and the
ratio cc/gloo of bus bandwidths.
    PYTHONPATH=build/python /usr/bin/python3 bench/torch_allreduce.py [--world 2]"""
import argparse
import datetime
import os
import statistics
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    print("torch_allreduce: python3-torch is not importable (./scripts/install-deps.sh)")
    sys.exit(77)


def sizes(lo, hi):
    s = lo
    while s <= hi:
        yield s
        s *= 4 if s < (1 << 20) else 2


def loop(tensor, group, iters):
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor, group=group)
    return (time.perf_counter() - start) / iters


def worker(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("CC_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    import cc_torch  # noqa: F401

    dist.init_process_group("cc", rank=rank, world_size=args.world, timeout=datetime.timedelta(seconds=300))
    groups = {"cc": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    n = args.world
    if rank == 0:
        print(f"torch_allreduce: torch {torch.__version__}, {n} ranks, float32 sum, "
              f"median of {args.rounds} rounds, cc then gloo at each size")
        print(f"{'bytes':>10} | {'cc us':>9} {'algbw':>7} {'busbw':>7} | {'gloo us':>9} {'algbw':>7} {'busbw':>7} | {'cc/gloo':>7}")
    for size in sizes(args.min_bytes, args.max_bytes):
        tensor = torch.ones(max(1, size // 4))
        iters = max(5, min(args.max_iters, int(args.loop_bytes // size)))
        times = {"cc": [], "gloo": []}
        for name, group in groups.items():
            loop(tensor, group, 3)  # warm-up
        for _ in range(args.rounds):
            for name, group in groups.items():
                times[name].append(loop(tensor, group, iters))
        if rank == 0:
            row = f"{size:>10} |"
            bus = {}
            for name in groups:
                t = statistics.median(times[name])
                algbw = size / t / 1e9
                bus[name] = algbw * 2 * (n - 1) / n
                row += f" {t * 1e6:>9.1f} {algbw:>7.3f} {bus[name]:>7.3f} |"
            row += f" {bus['cc'] / bus['gloo']:>7.2f}"
            print(row, flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--min-bytes", type=int, default=8)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-iters", type=int, default=200)
    parser.add_argument("--loop-bytes", type=float, default=256e6, help="bytes reduced per timed loop")
    parser.add_argument("--port", type=int, default=29531)
    args = parser.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
