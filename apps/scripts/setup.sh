#!/usr/bin/env bash
# Installs what meshtrain needs (Debian: apt-get as root; a cluster: prints
# the module line to use instead) and builds it. On Debian this includes a
# local Slurm (slurmctld, slurmd, sbatch, munge) for the Slurm tests, which
# never install anything themselves.
#   apps/scripts/setup.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}; shift || true

DEB_PKGS="build-essential cmake pkg-config openmpi-bin libopenmpi-dev libhdf5-openmpi-dev \
hdf5-tools libopenblas-dev libopenblas-openmp-dev libinih-dev libcjson-dev libxxhash-dev libdnnl-dev python3 gnuplot-nox \
slurmctld slurmd slurm-client munge"

have_deps() {
  command -v mpicc >/dev/null && command -v mpirun >/dev/null && command -v cmake >/dev/null &&
  command -v python3 >/dev/null && command -v gnuplot >/dev/null &&
  { [ ! -x /usr/bin/apt-get ] || { command -v slurmctld && command -v slurmd && command -v sbatch &&
                                    command -v munged; } >/dev/null; } &&
  pkg-config --exists inih libcjson libxxhash 2>/dev/null &&
  { [ ! -x /usr/bin/apt-get ] || [ -f /usr/include/oneapi/dnnl/dnnl.h ]; } &&
  { [ ! -x /usr/bin/apt-get ] || [ -d /usr/include/"$(gcc -print-multiarch 2>/dev/null)"/openblas-openmp ]; } &&
  { [ -f /usr/include/cblas.h ] || [ -f /usr/include/x86_64-linux-gnu/cblas.h ] ||
    ls /usr/include/*/cblas.h >/dev/null 2>&1 || [ -n "${OPENBLAS_ROOT:-}" ]; } &&
  { command -v h5pcc >/dev/null || ls /usr/include/hdf5/openmpi/hdf5.h >/dev/null 2>&1 ||
    [ -n "${HDF5_ROOT:-}" ]; }
}

if ! have_deps; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian packages: $DEB_PKGS"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $DEB_PKGS >/dev/null
  elif command -v module >/dev/null 2>&1 || [ -n "${SLURM_CLUSTER_NAME:-}" ] || [ -n "${MODULEPATH:-}" ]; then
    echo "setup: missing dependencies. On a cluster, load them first, e.g. on LEONARDO:" >&2
    echo "  source slurm/leonardo/env.sh   # or: module load openmpi hdf5 openblas cmake" >&2
    echo "and make inih and cJSON visible to pkg-config (PKG_CONFIG_PATH)." >&2
    exit 1
  else
    echo "setup: missing dependencies; as root on Debian/Ubuntu run:" >&2
    echo "  apt-get install $DEB_PKGS" >&2
    exit 1
  fi
fi

# numpy for the tests' independent references (tests/ckpt/gpt2_ref.py) and
# tokenizers for meshdata tokenize: from the package index of the python3 in
# use, only where missing
for pkg in numpy tokenizers; do
  if ! python3 -c "import $pkg" 2>/dev/null; then
    python3 -m pip install --quiet "$pkg" >/dev/null 2>&1 ||
      echo "setup: could not install $pkg for python3 (tests that need it skip)" >&2
  fi
done

JOBS=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$BUILD" -j "$JOBS" >/dev/null
echo "setup: built $BUILD/bin/{meshtrain,meshbench,meshdata}"
