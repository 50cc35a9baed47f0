#!/usr/bin/env python3
"""PyTorch DistributedDataParallel over gloo (or --backend cc, with build/python on
PYTHONPATH) on cc-train's reference model, for the data-parallel comparisons in
bench/dp_compare.sh and bench/torch_compare.sh: the model of bench/torch_gpt.py, N
processes started with torch.multiprocessing on this host, one thread each, B sequences
per rank, DDP's default 25 MB buckets (all-reduce overlapped with backward), AdamW and
clipping as cc-train. Prints the global tokens/s (all ranks' tokens per step over the
step time of rank 0), median over the timed steps. --no-sync runs every step inside
DDP's no_sync(): the same work with no gradient communication, the bound no backend
can beat."""
import contextlib
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel
    from torch_gpt import Gpt, add_model_arguments, timed_steps
except ImportError:
    print("torch_ddp: python3-torch is not importable (./scripts/install-deps.sh --demo)")
    sys.exit(77)


def worker(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("CC_SOCKET_IFNAME", "lo")
    torch.set_num_threads(args.threads)
    if args.backend == "cc":
        import cc_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend, rank=rank, world_size=args.world)
    torch.manual_seed(1337)
    # Every rank builds the same model from the seed. The causal masks are bool buffers,
    # which gloo cannot broadcast, and the same everywhere anyway: DDP leaves them alone.
    net = Gpt(args.vocab, args.seq, args.layers, args.heads, args.width)
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(net, [n for n, _ in net.named_buffers()])
    model = DistributedDataParallel(net, bucket_cap_mb=args.bucket_mb, broadcast_buffers=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    generator = torch.Generator().manual_seed(1 + rank)
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator)
    inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    with model.no_sync() if args.no_sync else contextlib.nullcontext():
        loss, rates = timed_steps(model, optimizer, inputs, targets, args.steps, args.world * args.batch * args.seq)
    if rank == 0:
        backend = args.backend + (" no_sync" if args.no_sync else "")
        print(f"torch_ddp: torch {torch.__version__} {backend} world {args.world} threads {args.threads} "
              f"loss {loss.item():.4f} median_tokens_per_s {statistics.median(rates):.0f}", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--world", type=int, default=2)
    add_model_arguments(parser, batch_help="sequences per rank")
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    parser.add_argument("--port", type=int, default=29517)
    parser.add_argument("--backend", default="gloo", choices=["gloo", "cc"])
    parser.add_argument("--no-sync", action="store_true", help="no gradient all-reduce (DDP's no_sync)")
    args = parser.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
