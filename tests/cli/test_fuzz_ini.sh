#!/usr/bin/env bash
# test_fuzz_ini.sh — a few hundred seeded mutations of the INI files in ini/ and tests/bad-input/
# (and odd --set overrides) through `ctrain validate`, one in 40 also through `ctrain train`:
# no signal, no hang, every refusal explained, validate and train agreeing. The fuzzer and its
# knobs (FUZZ_SEED, FUZZ_N, FUZZ_ONLY to replay one case, ...) are in fuzz_ini.py; `make fuzz`
# runs 5000. Uses $BUILD/ctrain, so `make asan` / `make ubsan` fuzz the sanitized build.
set -u
cd "$(dirname "$0")/../.."
export BUILD="${BUILD:-build}"
exec python3 tests/cli/fuzz_ini.py
