"""Every torch.distributed operation through the backend "cc", on every dtype and reduce op,
against Gloo in the same job where Gloo has the call and against a sequential reference
(computed from every rank's input, which each rank can rebuild) everywhere. Inputs are
small integers, so that every sum, product, minimum and maximum is exact in every dtype
(float16 and bfloat16 included) whatever the reduction order: results must be equal, not
close; AVG divides once and is checked to the dtype's rounding. Run by tests/torch/torch_test.sh
under torchrun (1-4 ranks) and mpirun.
    ops_test.py            (RANK/WORLD_SIZE/MASTER_* from the launcher)"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import cc_torch  # noqa: F401  (registers "cc")

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
DTYPES = FLOATS + INTS + [torch.bool]
OPS = {
    "sum": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "avg": dist.ReduceOp.AVG,
}
failures = []
checks = 0


def expect(condition, what):
    global checks
    checks += 1
    if not condition:
        failures.append(what)
        print(f"rank {dist.get_rank()}: FAILED {what}", flush=True)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def values(rank, shape, dtype, op="sum", salt=0):
    """Rank `rank`'s input: small integers whose reductions are exact in `dtype`."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * salt + 3)
    numel = 1
    for s in shape:
        numel *= s
    if dtype == torch.bool:
        return (torch.randint(0, 2, (numel,), generator=g) == 1).view(shape)
    if op == "product":
        # -1, 1, 2: products of up to 4 ranks stay small (uint8: 1 and 2).
        pick = torch.tensor([1, 2] if dtype == torch.uint8 else [-1, 1, 2])
        x = pick[torch.randint(0, len(pick), (numel,), generator=g)]
    elif dtype == torch.uint8:
        x = torch.randint(0, 50, (numel,), generator=g)
    else:
        x = torch.randint(-30, 31, (numel,), generator=g)
    return x.to(dtype).view(shape)


def reduce_ref(tensors, op):
    dtype = tensors[0].dtype
    if dtype == torch.bool:
        stack = torch.stack([t.to(torch.uint8) for t in tensors])
        if op in ("sum", "max"):
            return stack.amax(0).to(torch.bool)
        return stack.amin(0).to(torch.bool)
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stack = torch.stack([t.to(wide) for t in tensors])
    if op == "sum":
        r = stack.sum(0)
    elif op == "product":
        r = stack.prod(0)
    elif op == "min":
        r = stack.amin(0)
    elif op == "max":
        r = stack.amax(0)
    else:  # avg: the sum divided once, as cc does
        r = stack.sum(0)
        return (r / len(tensors)).to(dtype) if dtype.is_floating_point else (r // len(tensors)).to(dtype)
    return r.to(dtype)


def close_avg(got, ref):
    if not got.dtype.is_floating_point:
        # Integer AVG: cc divides the wrapped sum, truncating; equal to within one.
        return (got.to(torch.int64) - ref.to(torch.int64)).abs().max().item() <= 1 if got.numel() else True
    tol = {torch.float16: 1e-3, torch.bfloat16: 8e-3}.get(got.dtype, 1e-6)
    return torch.allclose(got.to(torch.float64), ref.to(torch.float64), rtol=tol, atol=tol)


def gloo_has(fn):
    try:
        fn()
        return True
    except RuntimeError:
        return False


def against_gloo(gloo, what, cc_result, gloo_call, compare=True):
    """Where Gloo has the call for this dtype, its result must equal cc's. Every rank makes
    the call; `compare` says whether this rank's result is defined (a reduce's root)."""
    if gloo is None:
        return
    result = []
    if gloo_has(lambda: result.append(gloo_call(gloo))) and compare:
        got = result[0]
        if isinstance(cc_result, list):
            ok = len(got) == len(cc_result) and all(same(a, b) for a, b in zip(cc_result, got))
        else:
            ok = same(cc_result, got)
        expect(ok, f"{what} differs from gloo")


def run(gloo):
    rank, n = dist.get_rank(), dist.get_world_size()
    shape = (3, 5)

    # all_reduce: every dtype x op, contiguous and not, async too.
    for dtype in DTYPES:
        for name, op in OPS.items():
            if dtype == torch.bool and name == "avg":
                t = values(rank, shape, dtype)
                try:
                    dist.all_reduce(t, op=op)
                    expect(False, "all_reduce AVG on bool was not refused")
                except RuntimeError as e:
                    expect("AVG" in str(e), f"bool AVG message: {e}")
                continue
            inputs = [values(r, shape, dtype, name) for r in range(n)]
            ref = reduce_ref(inputs, name)
            t = inputs[rank].clone()
            dist.all_reduce(t, op=op)
            ok = close_avg(t, ref) if name == "avg" else same(t, ref)
            expect(ok, f"all_reduce {dtype} {name}: {t.flatten()[:6].tolist()} vs {ref.flatten()[:6].tolist()}")
            if gloo is not None and name != "avg" and dtype != torch.bool:
                g = inputs[rank].clone()
                if gloo_has(lambda: dist.all_reduce(g, op=op, group=gloo)):
                    expect(same(t, g), f"all_reduce {dtype} {name} differs from gloo")
            # A non-contiguous view: the strided elements are reduced, the rest untouched.
            wide = torch.zeros(shape[0], 2 * shape[1], dtype=dtype)
            wide[:, ::2] = inputs[rank]
            view = wide[:, ::2]
            work = dist.all_reduce(view, op=op, async_op=True)
            work.wait()
            expect(work.is_completed(), "async all_reduce not completed after wait")
            got = wide[:, ::2]
            ok = close_avg(got, ref) if name == "avg" else same(got, ref)
            expect(ok and not wide[:, 1::2].to(torch.float64).any(), f"all_reduce strided {dtype} {name}")

    for bad in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
        try:
            dist.all_reduce(torch.ones(4, dtype=torch.int32), op=bad)
            expect(False, f"{bad} was not refused")
        except RuntimeError as e:
            expect("bitwise" in str(e), f"bitwise refusal message: {e}")

    # Complex sums as pairs of reals.
    z = [torch.complex(values(r, shape, torch.float32), values(r, shape, torch.float32, salt=1)) for r in range(n)]
    t = z[rank].clone()
    dist.all_reduce(t)
    expect(torch.equal(t, sum(z[1:], z[0].clone())), "complex all_reduce")

    # A large float32 all-reduce of non-integers, to the bound of the summation order.
    big = [torch.randn(1 << 18, generator=torch.Generator().manual_seed(r)) for r in range(n)]
    t = big[rank].clone()
    dist.all_reduce(t)
    ref = torch.stack([b.double() for b in big]).sum(0)
    bound = n * 2.0 ** -23 * torch.stack([b.double().abs() for b in big]).sum(0) + 1e-30
    expect(bool(((t.double() - ref).abs() <= bound).all()), "large float32 all_reduce beyond the rounding bound")

    for dtype in DTYPES:
        for root in range(n):
            # broadcast
            t = values(rank, shape, dtype, salt=root)
            dist.broadcast(t, root)
            expect(same(t, values(root, shape, dtype, salt=root)), f"broadcast {dtype} root {root}")

            def gloo_broadcast(g, root=root, dtype=dtype):
                x = values(rank, shape, dtype, salt=root)
                dist.broadcast(x, root, group=g)
                return x
            against_gloo(gloo, f"broadcast {dtype} root {root}", t, gloo_broadcast)
            # reduce (sum and max), root only
            for name in ("sum", "max"):
                inputs = [values(r, shape, dtype, name) for r in range(n)]
                t = inputs[rank].clone()
                dist.reduce(t, root, op=OPS[name])
                if rank == root:
                    expect(same(t, reduce_ref(inputs, name)), f"reduce {dtype} {name} root {root}")

                def gloo_reduce(g, root=root, name=name, inputs=inputs):
                    x = inputs[rank].clone()
                    dist.reduce(x, root, op=OPS[name], group=g)
                    return x
                against_gloo(gloo, f"reduce {dtype} {name} root {root}", t, gloo_reduce, compare=rank == root)
            # gather and scatter
            mine = values(rank, shape, dtype, salt=5)
            outs = [torch.zeros(shape, dtype=dtype) for _ in range(n)] if rank == root else None
            dist.gather(mine, outs, dst=root)
            if rank == root:
                expect(all(same(outs[r], values(r, shape, dtype, salt=5)) for r in range(n)), f"gather {dtype} root {root}")
            pieces = [values(root, shape, dtype, salt=10 + r) for r in range(n)] if rank == root else None
            out = torch.zeros(shape, dtype=dtype)
            dist.scatter(out, pieces, src=root)
            expect(same(out, values(root, shape, dtype, salt=10 + rank)), f"scatter {dtype} root {root}")

        # all_gather: list, into one tensor, and into one tensor in place
        mine = values(rank, shape, dtype, salt=2)
        outs = [torch.zeros(shape, dtype=dtype) for _ in range(n)]
        dist.all_gather(outs, mine)
        want = [values(r, shape, dtype, salt=2) for r in range(n)]
        expect(all(same(outs[r], want[r]) for r in range(n)), f"all_gather {dtype}")
        flat = torch.zeros((n * shape[0], shape[1]), dtype=dtype)
        dist.all_gather_into_tensor(flat, mine)
        expect(same(flat, torch.cat(want)), f"all_gather_into_tensor {dtype}")
        flat = torch.zeros((n * shape[0], shape[1]), dtype=dtype)
        flat[rank * shape[0]:(rank + 1) * shape[0]] = mine
        dist.all_gather_into_tensor(flat, flat[rank * shape[0]:(rank + 1) * shape[0]])
        expect(same(flat, torch.cat(want)), f"all_gather_into_tensor in place {dtype}")
        if gloo is not None and dtype != torch.bool:
            g = [torch.zeros(shape, dtype=dtype) for _ in range(n)]
            if gloo_has(lambda: dist.all_gather(g, mine, group=gloo)):
                expect(all(same(outs[r], g[r]) for r in range(n)), f"all_gather {dtype} differs from gloo")

        # reduce_scatter: list and tensor, out of place and in place
        for name in ("sum", "min") if dtype != torch.bool else ("max",):
            inputs = [values(r, (n * shape[0], shape[1]), dtype, name, salt=3) for r in range(n)]
            ref = reduce_ref(inputs, name)[rank * shape[0]:(rank + 1) * shape[0]]
            out = torch.zeros(shape, dtype=dtype)
            dist.reduce_scatter(out, list(inputs[rank].chunk(n)), op=OPS[name])
            expect(same(out, ref), f"reduce_scatter {dtype} {name}")
            out = torch.zeros(shape, dtype=dtype)
            dist.reduce_scatter_tensor(out, inputs[rank], op=OPS[name])
            expect(same(out, ref), f"reduce_scatter_tensor {dtype} {name}")
            buf = inputs[rank].clone()
            part = buf[rank * shape[0]:(rank + 1) * shape[0]]
            dist.reduce_scatter_tensor(part, buf, op=OPS[name])
            expect(same(part, ref), f"reduce_scatter_tensor in place {dtype} {name}")

        # all_to_all: lists, even single, uneven single (some splits empty)
        ins = [values(rank, (2, 3), dtype, salt=20 + j) for j in range(n)]
        outs = [torch.zeros((2, 3), dtype=dtype) for _ in range(n)]
        dist.all_to_all(outs, ins)
        expect(all(same(outs[j], values(j, (2, 3), dtype, salt=20 + rank)) for j in range(n)), f"all_to_all {dtype}")
        single_in = torch.cat(ins)
        single_out = torch.zeros_like(single_in)
        dist.all_to_all_single(single_out, single_in)
        expect(same(single_out, torch.cat(outs)), f"all_to_all_single {dtype}")

        def gloo_all_to_all(g, single_in=single_in):
            x = torch.zeros_like(single_in)
            dist.all_to_all_single(x, single_in, group=g)
            return x
        against_gloo(gloo, f"all_to_all_single {dtype}", single_out, gloo_all_to_all)
        single_in = torch.cat(ins)
        dist.all_to_all_single(single_in, single_in)
        expect(same(single_in, torch.cat(outs)), f"all_to_all_single in place {dtype}")
        # rank r sends (r + j) % 3 rows to rank j
        send_splits = [(rank + j) % 3 for j in range(n)]
        recv_splits = [(j + rank) % 3 for j in range(n)]
        src = values(rank, (sum(send_splits), 4), dtype, salt=30)
        dst = torch.zeros((sum(recv_splits), 4), dtype=dtype)
        dist.all_to_all_single(dst, src, recv_splits, send_splits)
        pieces = []
        for j in range(n):
            theirs = values(j, (sum((j + k) % 3 for k in range(n)), 4), dtype, salt=30)
            start = sum((j + k) % 3 for k in range(rank))
            pieces.append(theirs[start:start + (j + rank) % 3])
        expect(same(dst, torch.cat(pieces)), f"all_to_all_single with splits {dtype}")

    # Coalesced forms.
    ts = [values(rank, (4,), torch.float32, salt=40 + i) for i in range(3)]
    refs = [reduce_ref([values(r, (4,), torch.float32, salt=40 + i) for r in range(n)], "sum") for i in range(3)]
    dist.all_reduce_coalesced(ts)
    expect(all(same(a, b) for a, b in zip(ts, refs)), "all_reduce_coalesced")
    ins = [values(rank, (2, i + 1), torch.float32, salt=50 + i) for i in range(2)]
    outs = [[torch.zeros((2, i + 1)) for i in range(2)] for _ in range(n)]
    dist.all_gather_coalesced(outs, ins)
    expect(all(same(outs[r][i], values(r, (2, i + 1), torch.float32, salt=50 + i)) for r in range(n) for i in range(2)),
           "all_gather_coalesced")

    # Point-to-point: every pair, both orders of posting, large messages (beyond any
    # transport's buffering) and a tag of their own.
    big = 3 << 20
    for peer in range(n):
        if peer == rank:
            continue
        out = torch.full((big,), float(rank))
        got = torch.empty(big)
        if rank < peer:
            works = [dist.isend(out, peer), dist.irecv(got, peer)]
        else:
            works = [dist.irecv(got, peer), dist.isend(out, peer)]
        for w in works:
            w.wait()
        expect(bool((got == peer).all()), f"isend/irecv with {peer}")
        tagged = torch.zeros(4, dtype=torch.int64)
        if rank < peer:
            dist.send(torch.arange(4) + 100 * rank, peer, tag=7)
            dist.recv(tagged, peer, tag=7)
        else:
            dist.recv(tagged, peer, tag=7)
            dist.send(torch.arange(4) + 100 * rank, peer, tag=7)
        expect(same(tagged, torch.arange(4) + 100 * peer), f"send/recv tag 7 with {peer}")
    if n > 1:
        # A ring in one batch: everyone sends right and receives left at once.
        right, left = (rank + 1) % n, (rank - 1) % n
        out = torch.full((big,), float(rank))
        got = torch.empty(big)
        ops = [dist.P2POp(dist.isend, out, right), dist.P2POp(dist.irecv, got, left)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        expect(bool((got == left).all()), "batch_isend_irecv ring")
        try:
            dist.send(torch.ones(1), rank)
            expect(False, "send to self was not refused")
        except RuntimeError as e:
            expect("itself" in str(e), f"send-to-self message: {e}")

    # async: a future that DDP-style callbacks chain on.
    t = torch.full((8,), float(rank + 1))
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    expect(same(doubled, torch.full((8,), float(n * (n + 1)))), "future chained on all_reduce")

    # Asynchronous for real: an all_reduce nobody waits for runs in the background.
    t = torch.full((1024,), float(rank + 1))
    work = dist.all_reduce(t, async_op=True)
    time.sleep(0.5)
    ran = bool((t == n * (n + 1) / 2).all())
    work.wait()
    expect(ran, "an async all_reduce did not run until wait()")
    # An async collective does not hold up a send posted after it that the peer needs
    # before it joins the collective.
    if n > 1:
        t = torch.ones(4)
        token = torch.zeros(1)
        if rank == 0:
            work = dist.all_reduce(t, async_op=True)
            dist.send(torch.ones(1), 1)
            work.wait()
        else:
            if rank == 1:
                dist.recv(token, 0)
            dist.all_reduce(t)
        expect(same(t, torch.full((4,), float(n))), "all_reduce after a send that the peer waited for")

    # Waiting for an async collective runs nothing posted after it on the waiting thread:
    # rank 1 joins the second all_reduce only after a message that rank 0 sends after
    # its first wait.
    if n > 1:
        x, y = torch.ones(4), torch.ones(4)
        if rank == 0:
            first = dist.all_reduce(x, async_op=True)
            second = dist.all_reduce(y, async_op=True)
            first.wait()
            dist.send(torch.ones(1), 1)
            second.wait()
        else:
            dist.all_reduce(x)
            if rank == 1:
                dist.recv(torch.zeros(1), 0)
            dist.all_reduce(y)
        expect(same(y, torch.full((4,), float(n))), "a later async all_reduce ran inside an earlier wait")

    # A subgroup of the even ranks makes its own communicator.
    evens = dist.new_group([r for r in range(n) if r % 2 == 0], backend="cc")
    if rank % 2 == 0:
        t = torch.ones(2) * rank
        dist.all_reduce(t, group=evens)
        expect(same(t, torch.ones(2) * sum(range(0, n, 2))), "all_reduce on a subgroup")

    # Bad input gets a clear error, not a crash.
    try:
        dist.all_gather_into_tensor(torch.zeros(n * 4 + 1), torch.zeros(4))
        expect(False, "all_gather_into_tensor with a wrong output size was not refused")
    except RuntimeError as e:
        expect("all_gather_into_tensor" in str(e), f"size refusal message: {e}")
    try:
        dist.all_to_all_single(torch.zeros(2 * n), torch.zeros(4 * n))
        expect(False, "all_to_all_single with a short output was not refused")
    except RuntimeError as e:
        expect("all_to_all_single" in str(e), f"all_to_all_single size message: {e}")
    dist.barrier()


def main():
    dist.init_process_group("cc", timeout=datetime.timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    run(gloo)
    rank, n = dist.get_rank(), dist.get_world_size()
    status = torch.tensor([len(failures)])
    dist.all_reduce(status, group=gloo)
    if rank == 0:
        print(f"ops_test: {n} ranks, {checks} checks on rank 0, {status.item()} failed on all ranks", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if status.item() else 0)


if __name__ == "__main__":
    main()
