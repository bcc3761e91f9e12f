#!/usr/bin/env bash
# Checks the GPU-machine bundle (jobs/bundle-gpu.sh): its size stays under 48 MiB, and —
# as root, where chroot works — it runs in a root holding nothing but glibc and bash: the
# lone-process `tensorfem info` (MPI_Init starts the bundled orted), `mpirun -n 2`, and
# the CPU-only run of a small PSC problem with its HDF5 output. Elsewhere the chroot part
# says it is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/bundle}
jobs/bundle-gpu.sh "$out"
archive="$out/tensorfem-gpu.tar.gz"
size=$(stat -c %s "$archive")
limit=$((48 * 1048576))
if ((size >= limit)); then
  echo "check-bundle: $archive is $((size / 1048576)) MiB, over the 48 MiB a GPU machine can receive" >&2
  exit 1
fi
if [[ $(id -u) -ne 0 ]] || ! command -v chroot >/dev/null; then
  echo "check-bundle: the glibc-only chroot run is skipped (needs root)"
  exit 0
fi

root=$(mktemp -d /tmp/tensorfem-bundle-root.XXXXXX)
# Fresh proc, sys and tmpfs instances (never bind mounts of the host's, which can carry
# submounts along), and the root removed only once nothing is mounted under it.
cleanup() {
  # Our own instances: detached lazily where a lingering OpenMPI daemon still holds them.
  for m in dev/shm proc sys; do
    umount "$root/$m" 2>/dev/null || umount -l "$root/$m" 2>/dev/null || true
  done
  if grep -q " $root/" /proc/mounts; then
    echo "check-bundle: $root still has mounts; left in place" >&2
  else
    rm -rf "$root"
  fi
}
trap cleanup EXIT
mkdir -p "$root"/{lib/x86_64-linux-gnu,lib64,bin,usr/bin,tmp,proc,sys,dev/shm,work}
tar -xzf "$archive" -C "$root/work"
for tool in bash env dirname; do
  cp "$(command -v "$tool")" "$root/usr/bin/"
done
ln -s ../usr/bin/bash "$root/bin/bash"
# glibc and what bash itself needs; nothing of HDF5, OpenMPI or their dependencies.
for lib in $(ldd "$(command -v bash)" "$(command -v env)" | awk '/=> \// {print $3}') \
    /lib/x86_64-linux-gnu/lib{c,m,dl,pthread,rt,resolv,util}.so.*; do
  [[ -e "$lib" ]] && cp -L "$lib" "$root/lib/x86_64-linux-gnu/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
mknod -m 666 "$root/dev/null" c 1 3
mknod -m 666 "$root/dev/zero" c 1 5
mknod -m 666 "$root/dev/urandom" c 1 9
if ! chroot "$root" /usr/bin/env >/dev/null 2>&1 || ! mount -t proc proc "$root/proc" 2>/dev/null; then
  echo "check-bundle: the glibc-only chroot run is skipped (chroot or mount not permitted here)"
  exit 0
fi
mount -t sysfs sysfs "$root/sys"
mount -t tmpfs tmpfs "$root/dev/shm"
chroot "$root" /usr/bin/bash -c '
  set -e
  export PATH=/usr/bin:/bin HOME=/tmp
  cd /tmp
  b=/work/tensorfem-gpu
  $b/run info
  source $b/env.sh
  case "$(mpirun -n 2 $b/bin/tensorfem info)" in *"size 2"*) ;; *) echo "mpirun -n 2 did not start 2 ranks"; exit 1;; esac
  printf "backend = \"auto\"\n[mesh]\nkind = \"unit-square\"\nelement = \"q1\"\nn = 32\nh0 = 0.125\n[problem]\nk = [1, 2]\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f32\"\nrefine = true\n[output]\npath = \"/tmp/psc.h5\"\n" > /tmp/psc.toml
  $b/run run /tmp/psc.toml
  test -s /tmp/psc.h5
'
echo "check-bundle: $archive ($((size / 1048576)) MiB) runs in a root with nothing but glibc: info, mpirun -n 2, a PSC run with HDF5 output"
