#!/usr/bin/env python3
"""bench/kernel_share.py — how much of a training run's CPU time its sgemm micro-kernel took,
and so how fast that kernel ran while training (bench/run.sh with PERF=1).

Usage: kernel_share.py LABEL PERF_DATA TOKENS_PER_S FLOPS_PER_TOKEN ARITH_GFLOPS

Reads `perf report` of PERF_DATA (a `perf record` of `ctrain train`, no call graphs needed) and
prints one line: the share s of the training steps' samples in OpenBLAS's micro-kernel
(`sgemm_kernel_*`: the FMAs of every product; packing, `sgemm_*copy_*`, is not in it), and the
rate the kernel ran at, R / s, where R = TOKENS_PER_S x FLOPS_PER_TOKEN is training's rate
over the same steps as the samples (every step, warm-up included: run.sh passes the harmonic
mean of the steps' tokens/s, not the table's median step):
every FLOP counted in FLOPS_PER_TOKEN is a product's (the model's linear layers, the head and
attention's scores and P V all call sgemm), so the kernel did them in s of the CPU time. A
step's fraction of the arithmetic peak is s times the kernel's own fraction: it cannot pass
the kernel's.

Samples outside the steps are left out by symbol: the weights' initialisation (the Box-Muller
normals: normal01 and libm's log, sin, cos; init_unit) and the final checkpoint
(checkpoint_save and the kernel's page-cache copy of its write). Sampling is per CPU: a thread
spinning in OpenMP's barrier counts, one the kernel descheduled does not.
"""
import re
import subprocess
import sys

OUTSIDE_STEPS = {"normal01", "__ieee754_log_fma", "__cos_fma", "__sin_fma", "init_unit",
                 "checkpoint_save", "copy_folio_from_iter_atomic"}


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: kernel_share.py LABEL PERF_DATA TOKENS_PER_S FLOPS_PER_TOKEN "
                 "ARITH_GFLOPS")
    label, data = sys.argv[1], sys.argv[2]
    tps, fpt, arith = (float(x) for x in sys.argv[3:6])
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "sym",
                             "-F", "sample,sym", "--stdio"],
                            capture_output=True, text=True, check=True).stdout
    total = kernel = outside = 0
    for line in report.splitlines():
        m = re.match(r"\s*(\d+)\s+\[.\]\s+(\S+)", line)
        if not m:
            continue
        n, sym = int(m.group(1)), m.group(2)
        total += n
        if sym in OUTSIDE_STEPS:
            outside += n
        elif sym.startswith("sgemm_kernel_"):
            kernel += n
    steps = total - outside
    if steps <= 0 or kernel == 0:
        print(f"{label}: perf: no samples of the steps or of sgemm_kernel_* in {data}")
        return
    share = kernel / steps
    rate = tps * fpt / 1e9
    print(f"{label}: perf: the sgemm micro-kernel took {100 * share:.1f}% of the steps' "
          f"{steps} samples ({outside} of start-up and the final checkpoint left out); training "
          f"ran {rate:.1f} GFLOP/s over all its steps, so the kernel ran {rate / share:.1f} GFLOP/s = "
          f"{100 * rate / share / arith:.1f}% of the arithmetic peak while training "
          f"(perf's own cost included)")


if __name__ == "__main__":
    main()
