"""DistributedDataParallel, unchanged, over a backend: bench/torch_gpt.py's model (tiny),
AdamW with clipping, each rank its own data; rank 0 writes one loss per step to --out.
tests/torch/torch_test.sh runs it under torchrun with backend cc and with gloo, with no
hook and with each of DDP's communication hooks, and compares the losses.
    ddp_test.py --backend cc|gloo --hooks none,fp16,bf16,powersgd --out PREFIX"""
import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_gpt import Gpt  # noqa: E402

import cc_torch  # noqa: F401,E402


def train(args, hook, rank):
    """20 steps of DDP with one communication hook; the losses rank 0 saw."""
    # Each rank starts from different weights: DDP's initial broadcast must make them rank 0's.
    torch.manual_seed(1337 + rank)
    vocab, seq = 64, 16
    net = Gpt(vocab, seq, layers=2, heads=2, width=32)
    # The causal masks are bool buffers, the same everywhere: Gloo cannot broadcast bool.
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(net, [n for n, _ in net.named_buffers()])
    model = DistributedDataParallel(net, bucket_cap_mb=0.05)  # several buckets
    if hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        # torch 1.13 refuses bf16_compress_hook by its name unless CUDA 11 and NCCL 2.10 are
        # there, though the hook itself is device-neutral: call it under another name.
        def bf16_hook(state, bucket):
            return default_hooks.bf16_compress_hook(state, bucket)
        model.register_comm_hook(None, bf16_hook)
    elif hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                            start_powerSGD_iter=3, random_seed=7)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    generator = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(args.steps):
        data = torch.randint(0, vocab, (4, seq + 1), generator=generator)
        optimizer.zero_grad(set_to_none=True)
        loss = model(data[:, :-1].contiguous(), data[:, 1:].contiguous())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    # Every rank holds the same weights after the last step.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    if not all(torch.equal(g, gathered[0]) for g in gathered):
        print(f"ddp_test: rank {rank}, hook {hook}: the ranks' weights differ", flush=True)
        sys.exit(1)
    return losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="cc")
    parser.add_argument("--hooks", default="none", help="comma-separated: none, fp16, bf16, powersgd")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", required=True, help="rank 0 writes OUT-HOOK.txt for each hook")
    args = parser.parse_args()
    hooks = args.hooks.split(",")
    unknown = [h for h in hooks if h not in ("none", "fp16", "bf16", "powersgd")]
    if unknown:
        parser.error(f"--hooks: unknown hook {unknown[0]!r} (none, fp16, bf16 or powersgd)")
    torch.set_num_threads(1)
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    # One process group for every hook: each run builds its model and DDP afresh, so the
    # runs are independent (a launch costs more than the 20 steps).
    for hook in hooks:
        losses = train(args, hook, rank)
        if rank == 0:
            with open(f"{args.out}-{hook}.txt", "w") as out:
                out.write("\n".join(f"{x:.9g}" for x in losses) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
