#!/usr/bin/env bash
# gpu-kit.sh — prepare .deps-gpu/ (ignored by git): the Debian packages the GPU machine lacks
# (inih, OpenBLAS, sentencepiece, OpenMPI, pkg-config), fetched with `apt-get download` and
# unpacked with `dpkg -x`, so tests/gpu/run.sh can build ctrain there with nothing installed.
# Not for: CUDA, cuBLAS or NCCL (the GPU machine has its own toolkit) or installing anything here.
# Usage: scripts/gpu-kit.sh   (then carry ".deps-gpu" in the device call; see tests/gpu/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
kit=.deps-gpu
# Link-time closure of what the host, the plugins and the unit-test runner link (checked with
# ldd on Debian 12): libmpi needs hwloc, libevent and udev; OpenBLAS needs gfortran/quadmath.
packages=(
    libinih1 libinih-dev
    libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5 libquadmath0
    libsentencepiece0 libsentencepiece-dev
    libopenmpi3 libopenmpi-dev libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libudev1
    pkgconf pkgconf-bin libpkgconf3
)
rm -rf "$kit"
mkdir -p "$kit/debs" "$kit/root"
( cd "$kit/debs" && apt-get download "${packages[@]}" >/dev/null ) || {
    echo "gpu-kit: apt-get download failed ---> run 'apt-get update' once and retry" >&2
    exit 1
}
for deb in "$kit"/debs/*.deb; do dpkg -x "$deb" "$kit/root"; done
lib="$kit/root/usr/lib/x86_64-linux-gnu"
# dpkg -x runs no maintainer scripts: make the links update-alternatives would have made.
ln -sf openblas-pthread/libopenblas.so "$lib/libopenblas.so"
ln -sf openblas-pthread/libopenblas.so.0 "$lib/libopenblas.so.0"
ln -sf ../openblas-pthread/pkgconfig/openblas.pc "$lib/pkgconfig/openblas.pc"
# Absolute symlinks inside the kit would point at the GPU machine's own /usr: make them relative.
# (an `if`, not `[ ] && ln`: under set -e and pipefail the loop's status must not be its last
# link's test; a dangling absolute link is left as it is)
find "$kit/root" -type l | while read -r l; do
    t=$(readlink "$l")
    case "$t" in /*)
        if [ -e "$kit/root$t" ]; then ln -sfr "$kit/root$t" "$l"; fi ;;
    esac
done
# Drop what the build never reads (static archives, LAPACK, docs, Fortran modules, Java).
rm -rf "$kit/debs" "$kit/root/usr/share/doc" "$kit/root/usr/share/man" \
       "$kit/root/usr/lib/x86_64-linux-gnu/fortran" "$lib/openmpi/lib/"*java* \
       "$lib/openmpi/include/"*.mod "$lib/openblas-pthread/cmake" \
       "$lib"/openblas-pthread/liblapack* "$lib"/openblas-pthread/libblas*
find "$kit/root" \( -name '*.a' -o -name '*.la' \) -delete
# An environment file that run.sh sources (paths relative to the repository root).
cat > "$kit/env.sh" <<'ENV'
# source it: makes the unpacked kit (tests/gpu/run.sh unpacks kit.tar.gz into
# $CT_GPU_KIT/root) visible to cc, the linker, pkg-config and ld.so
K="${CT_GPU_KIT:-$PWD/.deps-gpu}/root"
L="$K/usr/lib/x86_64-linux-gnu"
export CPATH="$K/usr/include${CPATH:+:$CPATH}"
export LIBRARY_PATH="$L:$L/openblas-pthread:$L/openmpi/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$L:$L/openblas-pthread:$L/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_SYSROOT_DIR="$K"
export PKG_CONFIG_LIBDIR="$L/pkgconfig:$L/openblas-pthread/pkgconfig:$K/usr/share/pkgconfig"
command -v pkg-config >/dev/null 2>&1 || export PATH="$K/usr/bin:$PATH"
ENV
# One compressed file travels (the working tree that travels is limited to 64 MiB); run.sh
# unpacks it outside the checkout on the GPU machine. gzip, not xz: the GPU image may lack xz,
# and Python's tarfile (run.sh's fallback) always has zlib. Checked here by listing it back.
tar -C "$kit" -czf "$kit/kit.tar.gz" root
n_in=$(find "$kit/root" | wc -l)
n_out=$(python3 -c 'import sys, tarfile; print(len(tarfile.open(sys.argv[1]).getnames()))' \
        "$kit/kit.tar.gz")
if [ "$n_in" -ne "$n_out" ]; then
    echo "gpu-kit: kit.tar.gz lists $n_out entries, the kit has $n_in ---> rerun; check disk space" >&2
    exit 1
fi
rm -rf "$kit/root"
du -sh "$kit/kit.tar.gz" | awk '{print "gpu-kit: .deps-gpu/kit.tar.gz is " $1 " (carry .deps-gpu: it and env.sh)"}'
