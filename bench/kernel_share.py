#!/usr/bin/env python3
"""bench/kernel_share.py — how much of a training run's CPU time its product kernels took (the
OpenBLAS sgemm micro-kernel, oneDNN's JIT kernels), and so how fast they ran while training;
and where the rest of the step went (bench/run.sh with PERF=1).

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

oneDNN's kernels are code it generates at run time: run.sh sets ONEDNN_JIT_PROFILE=2 so oneDNN
writes /tmp/perf-PID.map and perf names them; any sample in JIT code (perf-PID.map, [JIT]) is
oneDNN's, the only code generator in the process. A second line attributes the steps' samples:
the product kernels, the BLAS's packing (OpenBLAS's sgemm_*copy_* and sgemm_beta, oneDNN's
library code: its B-matrix copies and plumbing), the bf16 conversions (the gpt plugin's
operand copies and roundings, the device's casts), OpenMP's waits (libgomp) and the rest.
oneDNN's generated copy and post-processing kernels (names with "copy", "pp_kernel") count as
packing.

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


# The gpt plugin's and the cpu device's bf16 work: operand copies, roundings, weight widening.
BF16 = ("gpt_to_bf16", "gpt_round_bf16", "gpt_weights", "head_weights", "dlogits_slice",
        "grad_add_bf16", "cpu_cast")


def classify(dso, sym):
    """Which part of a step a sample (its object file and symbol) belongs to."""
    if dso.startswith("perf-") or "[JIT]" in dso:  # oneDNN's generated code
        return "packing" if "copy" in sym or "pp_kernel" in sym else "onednn"
    if sym.startswith("sgemm_kernel_"):
        return "openblas"
    if "libopenblas" in dso or "libdnnl" in dso:
        return "packing"
    if "libgomp" in dso:
        return "omp"
    if any(sym == b or sym.startswith(b + ".") or sym.startswith(b + "._omp") for b in BF16):
        return "bf16"
    return "rest"


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: kernel_share.py LABEL PERF_DATA TOKENS_PER_S FLOPS_PER_TOKEN "
                 "ARITH_GFLOPS")
    label, data = sys.argv[1], sys.argv[2]
    tps, fpt, arith = (float(x) for x in sys.argv[3:6])
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym",
                             "-F", "sample,dso,sym", "--stdio", "-t", "|"],
                            capture_output=True, text=True, check=True).stdout
    total = outside = 0
    part = dict.fromkeys(("openblas", "onednn", "packing", "bf16", "omp", "rest"), 0)
    for line in report.splitlines():
        m = re.match(r"\s*(\d+)\s*\|(.*?)\s*\|\[.\]\s+(.*?)\s*$", line)
        if not m:
            continue
        n, dso, sym = int(m.group(1)), m.group(2), m.group(3)
        total += n
        if sym in OUTSIDE_STEPS:
            outside += n
        else:
            part[classify(dso, sym)] += n
    steps = total - outside
    kernel = part["openblas"] + part["onednn"]
    if steps <= 0 or kernel == 0:
        print(f"{label}: perf: no samples of the steps or of a product kernel in {data}")
        return
    share = kernel / steps
    rate = tps * fpt / 1e9
    pct = {k: 100.0 * v / steps for k, v in part.items()}
    print(f"{label}: perf: products' kernels {pct['openblas'] + pct['onednn']:.1f}% (OpenBLAS "
          f"micro-kernel {pct['openblas']:.1f}%, oneDNN's JIT kernels {pct['onednn']:.1f}%), "
          f"packing and BLAS copies {pct['packing']:.1f}%, bf16 conversions {pct['bf16']:.1f}%, "
          f"OpenMP waits {pct['omp']:.1f}%, the rest {pct['rest']:.1f}%")
    print(f"{label}: perf: the product kernels took {100 * share:.1f}% of the steps' "
          f"{steps} samples ({outside} of start-up and the final checkpoint left out); training "
          f"ran {rate:.1f} GFLOP/s over all its steps, so the kernels ran {rate / share:.1f} GFLOP/s = "
          f"{100 * rate / share / arith:.1f}% of the arithmetic peak while training "
          f"(perf's own cost included)")


if __name__ == "__main__":
    main()
