#!/usr/bin/env bash
# Bundles tensorfem for a GPU machine that has a CUDA driver but no Rust, no network and
# none of the libraries tensorfem links (the problem a cluster user meets on a bare node):
#
#   jobs/bundle-gpu.sh [OUT]        (default OUT: target/bundle)
#
# writes OUT/tensorfem-gpu.tar.gz, holding
#   bin/tensorfem            the release binary (debug info stripped)
#   tests/{gpu,kernels,psc,mg,mg_meshes,stokes}  the prebuilt CUDA test binaries (cargo test --no-run)
#   ptx/*.ptx                the kernels compiled for sm_90 (no NVRTC needed there)
#   lib/                     every shared library the binaries load that is not glibc's
#                            (HDF5, OpenMPI and what they pull in), and OpenMPI's plugins
#   bin/{mpirun,orted}       OpenMPI's launcher and daemon (MPI_Init of a lone process
#                            starts orted too), with its help texts in share/
#   run                      launcher: run ARGS… = tensorfem ARGS… with the paths set
#   test-gpu                 runs the CUDA tests with TENSORFEM_REQUIRE_CUDA=1
# On the GPU machine: tar xzf tensorfem-gpu.tar.gz && tensorfem-gpu/test-gpu
# (or tensorfem-gpu/run bench psc --backend cuda …).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/bundle}
name=tensorfem-gpu
root="$out/$name"
tests=(gpu kernels psc mg mg_meshes stokes)

make -s build >/dev/null
# The CUDA test binaries, built once; cargo names their paths in its JSON messages.
mapfile -t executables < <(cargo test --release --no-run --message-format=json \
    "${tests[@]/#/--test=}" 2>/dev/null \
  | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["target"]["name"], m["executable"])')
if ((${#executables[@]} != ${#tests[@]})); then
  echo "bundle-gpu: expected ${#tests[@]} test binaries, cargo built ${#executables[@]}" >&2
  exit 1
fi

rm -rf "$root"
mkdir -p "$root"/{bin,tests,ptx,lib}
cp target/release/tensorfem "$root/bin/"
# OpenMPI's launcher and daemon (a lone process's MPI_Init starts orted as well).
for tool in orterun orted; do
  cp -L "$(command -v "$tool")" "$root/bin/"
done
ln -s orterun "$root/bin/mpirun"
for entry in "${executables[@]}"; do
  cp "${entry#* }" "$root/tests/${entry%% *}"
done
strip --strip-debug "$root"/bin/tensorfem "$root"/tests/*
make -s ptx PTX_DIR="$root/ptx" >/dev/null

# Libraries: everything the loader resolves for the binaries and OpenMPI's plugins, except
# glibc's own (the GPU machine's glibc must be at least as new as this machine's).
glibc='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64)\.so'
ompi_plugins=$(dirname "$(readlink -f "$(ldconfig -p | awk '/libmpi\.so\.40 /{print $NF; exit}')")")/openmpi/lib/openmpi3
[[ -d "$ompi_plugins" ]] || ompi_plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
mkdir -p "$root/lib/openmpi3"
cp -L "$ompi_plugins"/*.so "$root/lib/openmpi3/" 2>/dev/null || true
libraries() {
  ldd "$@" 2>/dev/null | awk '/=> \// {print $3}' | sort -u
}
for lib in $(libraries "$root"/bin/* "$root"/tests/* "$root"/lib/openmpi3/*.so); do
  base=$(basename "$lib")
  [[ "$base" =~ $glibc ]] && continue
  [[ -e "$root/lib/$base" ]] || cp -L "$lib" "$root/lib/$base"
done
strip --strip-unneeded "$root"/lib/*.so* "$root"/lib/openmpi3/*.so 2>/dev/null || true
if [[ -d /usr/share/openmpi ]]; then
  mkdir -p "$root/share" && cp -r /usr/share/openmpi "$root/share/"
fi

cat > "$root/env.sh" <<'EOF'
# Paths for the bundled binaries: the bundle's libraries first, then the machine's CUDA.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cuda_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
  [[ -d "$d" ]] && cuda_libs="$cuda_libs:$d"
done
export LD_LIBRARY_PATH="$here/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TENSORFEM_PTX_DIR="${TENSORFEM_PTX_DIR:-$here/ptx}"
export PATH="$here/bin:$PATH"
export OPAL_PREFIX="$here"
export OMPI_MCA_mca_base_component_path="$here/lib/openmpi3"
export OPAL_PKGDATADIR="$here/share/openmpi"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One node, no ssh: OpenMPI starts its daemon locally; PMIx's compression plugin is not
# bundled (nothing here needs it), so its notice is silenced. A machine with PMIx of its own
# (another version) has plugins in the path the bundled library searches: they fail to load
# against it, harmlessly (nothing here needs them), and their errors are silenced too
# (seen on the H200 machine: a warning per process for pmix_mca_pcompress_zlib).
export OMPI_MCA_plm=isolated PMIX_MCA_pcompress_base_silence_warning=1
export PMIX_MCA_mca_base_component_show_load_errors=0
EOF
cat > "$root/run" <<'EOF'
#!/usr/bin/env bash
# tensorfem with the bundle's libraries and kernels: run ARGS… is tensorfem ARGS….
source "$(dirname "$0")/env.sh"
exec "$here/bin/tensorfem" "$@"
EOF
cat > "$root/test-gpu" <<'EOF'
#!/usr/bin/env bash
# The CUDA tests of `make test-gpu`, from the prebuilt binaries; a missing GPU fails.
source "$(dirname "$0")/env.sh"
export TENSORFEM_REQUIRE_CUDA=1
status=0
for t in "$here"/tests/*; do
  echo "== $(basename "$t")"
  "$t" --test-threads=1 "$@" || status=1
done
exit $status
EOF
chmod +x "$root/run" "$root/test-gpu"

tar -C "$out" -czf "$out/$name.tar.gz" "$name"
size=$(stat -c %s "$out/$name.tar.gz")
echo "bundle-gpu: $out/$name.tar.gz, $((size / 1048576)) MiB ($(du -sh "$root" | cut -f1) unpacked), $(ls "$root/lib" | wc -l) libraries"
