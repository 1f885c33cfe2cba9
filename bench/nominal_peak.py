#!/usr/bin/env python3
"""nominal_peak.py — this CPU's nominal fp32 arithmetic peak, an estimate for bench/run.sh:
cores x clock x FLOPs per cycle. Prints "GFLOPS|how" (one line). Not a measurement: the
measured arithmetic peak is bench/fma_peak.c's (run.sh divides by that one and prints this
estimate beside it; on a VM the clock below is the base clock, not the turbo one).

- cores: os.cpu_count() (the CPUs this process may use).
- clock: /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq when the kernel has cpufreq,
  else "cpu MHz" of /proc/cpuinfo (on a VM the nominal clock the hypervisor reports: turbo
  and AVX-512 down-clocking are unknown).
- FLOPs per cycle from the vector width in /proc/cpuinfo's flags: AVX-512 16 fp32 lanes,
  AVX2+FMA 8, else SSE 4 (no FMA); times 2 for the fused multiply-add, times 2 FMA units per
  core for AVX2/AVX-512 — assumed, since cpuid does not say (some Xeon Silver parts have one).
So the figure is good to about a factor of 2 either way.
"""
import os
import re

info = open("/proc/cpuinfo").read()
flags = set(re.search(r"^flags\s*:(.*)$", info, re.M).group(1).split())
cores = os.cpu_count()
try:
    with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
        mhz, src = int(f.read()) / 1000.0, "cpufreq max"
except OSError:
    mhz, src = float(re.search(r"^cpu MHz\s*:\s*([0-9.]+)", info, re.M).group(1)), "/proc/cpuinfo cpu MHz"
if "avx512f" in flags:
    isa, per_cycle = "AVX-512, 2 FMA units assumed", 16 * 2 * 2
elif "avx2" in flags and "fma" in flags:
    isa, per_cycle = "AVX2+FMA, 2 FMA units assumed", 8 * 2 * 2
else:
    isa, per_cycle = "SSE, no FMA", 4 * 2
gflops = cores * mhz * 1e6 * per_cycle / 1e9
print(f"{gflops:.1f}|{cores} cores x {mhz:.0f} MHz ({src}) x {per_cycle} FLOP/cycle ({isa})")
