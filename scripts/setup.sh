#!/usr/bin/env bash
# Installs what the tests and the benchmarks need on a fresh Debian 12 machine:
# Open MPI (the MPI baseline and the mpirun bootstrap test), MPICH (the mpi transport's
# conformance suite again, built against it; Open MPI stays the default mpicc), clang/libclang and pkg-config
# (bindgen, for mpi-sys), a C compiler (the C API test), gfortran (the test of libnx's Fortran
# bindings), and rpcbind, libtirpc, rpcgen and the rpcsvc .x files (the SunRPC
# interoperability tests), and the unmodified programs the socket
# interposer is tested with (sockperf, iperf3, redis, netcat, nginx, curl), and iproute2 (the
# tcp transport's test across network namespaces). Idempotent: skips what is there.
set -euo pipefail
need=()
for pkg in libopenmpi-dev openmpi-bin mpich libmpich-dev clang libclang-dev pkg-config gcc libc6-dev gfortran \
    rpcbind libtirpc-dev rpcsvc-proto libnsl-dev \
    sockperf iperf3 redis-server redis-tools netcat-openbsd nginx-light curl iproute2; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
