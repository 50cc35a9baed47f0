#!/usr/bin/env python3
"""The reference model of cc-train (src/parallel/model) in PyTorch, for the throughput
comparison in bench/train_compare.sh: GPT-2-style blocks (LayerNorm, causal attention,
GELU-tanh MLP), a tied head, AdamW (betas 0.9/0.95, weight decay 0.1), global-norm
clipping at 1.0, one process, torch.set_num_threads(n). Prints which BLAS torch loaded:
Debian's torch falls back to the slow reference BLAS unless OpenBLAS is installed."""
import argparse
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("torch_gpt: python3-torch is not importable (./scripts/install-deps.sh --demo)")
    sys.exit(77)


class Block(nn.Module):
    def __init__(self, width, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, seq, layers, heads, width):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def loaded_blas():
    """The BLAS shared objects mapped into this process."""
    names = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "blas" in path.lower():
                names.add(path)
    return sorted(names)


def add_model_arguments(parser, batch_help=None):
    """cc-train's model and run flags, shared with torch_ddp.py."""
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help=batch_help)
    parser.add_argument("--steps", type=int, default=20, help="timed steps (after 3 warm-up steps)")
    parser.add_argument("--threads", type=int, default=1)


def timed_steps(model, optimizer, inputs, targets, steps, tokens_per_step):
    """3 warm-up steps, then `steps` timed ones (AdamW with clipping, as cc-train):
    the last loss and the tokens/s of each timed step."""
    rates = []
    for step in range(3 + steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        elapsed = time.perf_counter() - start
        if step >= 3:
            rates.append(tokens_per_step / elapsed)
    return loss, rates


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    add_model_arguments(parser)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()

    torch.manual_seed(1337)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    for line in torch.__config__.show().splitlines():
        if "BLAS" in line or "CPU capability" in line:
            print("torch config:", line.strip()[:200])
    print("torch BLAS loaded:", ", ".join(loaded_blas()) or "none found in /proc/self/maps")

    model = Gpt(args.vocab, args.seq, args.layers, args.heads, args.width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    generator = torch.Generator().manual_seed(1)
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator)
    inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    loss, rates = timed_steps(model, optimizer, inputs, targets, args.steps, args.batch * args.seq)
    print(f"torch: loss {loss.item():.4f} median_tokens_per_s {statistics.median(rates):.0f}")


if __name__ == "__main__":
    main()
