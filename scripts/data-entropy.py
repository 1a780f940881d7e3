"""Investigation (delete once answered): does NCCL's allgather busbw depend on
the bits it moves? 4x H200, build e894a30: NCCL's benchmark's check cost it
1.3-1.7% at 2-4 GiB (its timed loop runs on random floats), collbench's
0.3-0.6% (whole numbers up to 2^20); without either check the two agreed.

Run under torchrun, one process per GPU (python3, or /opt/torch/.venv/bin/python):
  NCCL_NVLS_ENABLE=0 timeout -k 10 300 python3 -m torch.distributed.run --standalone --nproc-per-node 4 scripts/data-entropy.py
Prints, per size, the median busbw of each kind of data over alternating rounds.
"""
import os
import statistics

import torch
import torch.distributed as dist

ROUNDS = int(os.environ.get("ROUNDS", "4"))
ITERS, WARMUP = 20, 5
SIZES = [int(s) << 20 for s in os.environ.get("SIZES_MIB", "512,2048,4096").split(",")]


def fill(kind, t, gen):
    """Writes data of one kind into float32 tensor t."""
    n = t.numel()
    if kind == "zeros":
        t.zero_()
    elif kind == "pattern":  # collbench's: whole numbers of magnitude <= 2^20
        t.copy_(torch.randint(-(1 << 20), (1 << 20) + 1, (n,), device=t.device, generator=gen, dtype=torch.int32).float())
    elif kind == "floats":  # NCCL's benchmark's: random sign, exponent, mantissa; no inf or nan
        bits = torch.randint(0, 1 << 31, (n,), device=t.device, generator=gen, dtype=torch.int64)
        sign = -((bits & 1) << 31)  # -2^31 or 0: the int32 sign bit, in range
        exp = 64 + (bits >> 1) % 127
        mant = (bits >> 8) & ((1 << 23) - 1)
        t.view(torch.int32).copy_((sign | (exp << 23) | mant).to(torch.int32))
    elif kind == "bits":  # every bit random
        t.view(torch.int32).copy_(torch.randint(-(1 << 31), (1 << 31) - 1, (n,), device=t.device, generator=gen, dtype=torch.int32))


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(rank + 1)
    kinds = ["zeros", "pattern", "floats", "bits"]
    res = {}
    for size in SIZES:
        send = torch.empty(size // 4 // world, dtype=torch.float32, device=dev)
        recv = torch.empty(size // 4, dtype=torch.float32, device=dev)
        for r in range(ROUNDS):
            order = kinds if r % 2 == 0 else kinds[::-1]
            for kind in order:
                fill(kind, send, gen)
                fill(kind, recv, gen)
                for _ in range(WARMUP):
                    dist.all_gather_into_tensor(recv, send)
                torch.cuda.synchronize()
                dist.barrier()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(ITERS):
                    dist.all_gather_into_tensor(recv, send)
                b.record()
                b.synchronize()
                t = a.elapsed_time(b) / 1e3 / ITERS
                tt = torch.tensor([t], device=dev)
                dist.all_reduce(tt, op=dist.ReduceOp.MAX)
                busbw = size / tt.item() * (world - 1) / world / 1e9
                res.setdefault((size, kind), []).append(busbw)
        del send, recv
        torch.cuda.empty_cache()
    if rank == 0:
        for size in SIZES:
            base = statistics.median(res[(size, "zeros")])
            cells = []
            for kind in kinds:
                m = statistics.median(res[(size, kind)])
                cells.append(f"{kind} {m:.1f} ({(m / base - 1) * 100:+.1f}%; {min(res[(size, kind)]):.1f}-{max(res[(size, kind)]):.1f})")
            print(f"allgather {size >> 20} MiB, {world} GPUs, busbw GB/s, medians of {ROUNDS}: " + "  ".join(cells), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
