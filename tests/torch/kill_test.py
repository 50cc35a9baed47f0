"""A rank killed in the middle of an all-reduce (--mode kill), or stopped there and silent
(--mode stop, SIGSTOP): the others raise a RuntimeError carrying cc's message (the
operation, the peer) within the group's timeout, never hang. The processes are started
here, with an explicit rendezvous (init_method tcp://), so that no launcher kills the
survivors first.
    kill_test.py [--ranks 3] [--timeout 20] [--mode kill|stop]"""
import argparse
import datetime
import os
import signal
import socket
import subprocess
import sys
import time


def child(rank, size, port, timeout, mode):
    import torch
    import torch.distributed as dist
    import cc_torch  # noqa: F401

    dist.init_process_group("cc", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout))
    data = torch.ones(16 << 20)
    for _ in range(3):
        dist.all_reduce(data)
    victim = size - 1
    if rank == victim:
        dist.all_reduce(data, async_op=True)  # under way on the lane's thread
        time.sleep(0.002)
        os.kill(os.getpid(), signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
        time.sleep(3600)  # a stopped rank resumes only to be killed
    start = time.monotonic()
    try:
        for _ in range(1000):
            dist.all_reduce(data)
    except RuntimeError as error:
        waited = time.monotonic() - start
        print(f"rank {rank}: raised after {waited:.2f} s: {str(error).splitlines()[0][:300]}", flush=True)
        ok = str(error).startswith("cc: all_reduce failed") and "rank" in str(error)
        # A dead rank is seen when its connections close; a silent one at the deadline.
        ok = ok and (waited < timeout if mode == "kill" else 0.5 * timeout <= waited < 3 * timeout)
        os._exit(0 if ok else 3)
    print(f"rank {rank}: no error after the peer was killed", flush=True)
    os._exit(2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--child", type=int, default=-1)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", default="kill", choices=["kill", "stop"])
    args = parser.parse_args()
    if args.child >= 0:
        child(args.child, args.ranks, args.port, args.timeout, args.mode)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(r), "--ranks", str(args.ranks),
                               "--port", str(port), "--timeout", str(args.timeout), "--mode", args.mode])
             for r in range(args.ranks)]
    deadline = time.monotonic() + 3 * args.timeout + 30
    codes = []
    for index, proc in enumerate(procs):
        if index == len(procs) - 1 and args.mode == "stop":
            proc.kill()  # the survivors are done: end the stopped rank
        try:
            codes.append(proc.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append("hung")
    print("kill_test: exit codes", codes)
    survivors_ok = all(code == 0 for code in codes[:-1])
    victim_killed = codes[-1] == -signal.SIGKILL
    sys.exit(0 if survivors_ok and victim_killed else 1)


if __name__ == "__main__":
    main()
