#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (CPU only) into the project's git-ignored cache folder.
#
#   scripts/llama/build.sh            build when needed (idempotent: a no-op when the binary of
#                                     the pinned version is already there)
#   scripts/llama/build.sh --force    rebuild the binary (reuses the source and ccache)
#   scripts/llama/build.sh --clean    forget everything but the downloaded tarball, then build
#   scripts/llama/build.sh --target aarch64 [--force | --clean]
#                                     the same for aarch64 phones: a static llama-server
#                                     cross-compiled from the same verified source (below)
#
# Where llama.cpp comes from: no Debian 12 package has it and only the Debian and npm registries
# are reachable, but the npm package node-llama-cpp ships the full llama.cpp source as a git
# bundle (package/llama/gitRelease.bundle). The version is pinned and the tarball is checked
# against the pinned sha512 before anything in it is used.
#
# Result: $FLEETGATE_LLAMA_CACHE/bin/llama-server (default .cache/llama/bin/llama-server), a
# statically linked binary (no libllama.so beside it), plus the source tree in .../src (its
# gguf-py and models/ggml-vocab-*.gguf are what scripts/llama/make_tiny_model.py uses).
#
# Needs: npm, git, tar, openssl (or sha512sum+xxd), cmake, ninja (or make), a C++ compiler, flock;
# ccache is used when present (a rebuild then takes seconds instead of ~10 minutes on 2 cores).
# Environment: FLEETGATE_LLAMA_CACHE (default .cache/llama), FLEETGATE_LLAMA_JOBS (default nproc),
# FLEETGATE_LLAMA_NATIVE=1 (optimise for this CPU; see below).
#
# --target aarch64: Debian's g++-aarch64-linux-gnu with scripts/cross/aarch64-linux-gnu.cmake,
# linked statically (runs in any aarch64 distro image, e.g. the Acurast Shell runtime's), tuned
# for Snapdragon 8 Elite class CPUs: -march=armv8.2-a+dotprod+i8mm+fp16 (override with
# FLEETGATE_LLAMA_ARM_ARCH; a CPU without i8mm, older than Cortex-A710/X2, needs
# armv8.2-a+dotprod+fp16). No SVE: Qualcomm's Oryon cores have none. The download and the source
# tree stay in FLEETGATE_LLAMA_CACHE; the build tree and the binary go to
# FLEETGATE_LLAMA_AARCH64_CACHE (default .cache/llama-aarch64/bin/llama-server); --clean there
# forgets only that build. The compile runs at nice 19 (FLEETGATE_LLAMA_NICE): the cross build
# is never what the machine is waiting for.
set -euo pipefail

say() { printf '\033[1m[llama]\033[0m %s\n' "$*" >&2; }
die() { printf '[llama] error: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

target=host force=0 clean=0
while [ $# -gt 0 ]; do
  case "$1" in
    --force) force=1 ;;
    --clean) clean=1; force=1 ;;
    --target) [ $# -ge 2 ] || die "--target needs a value (host or aarch64)"; target="$2"; shift ;;
    --target=*) target="${1#--target=}" ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
  shift
done
case "$target" in
  host | aarch64) ;;
  *) die "unknown target '$target' (host or aarch64)" ;;
esac

NODE_LLAMA_CPP_VERSION=3.21.1
# `npm view node-llama-cpp@3.21.1 dist.integrity`, checked here against the tarball itself.
NODE_LLAMA_CPP_INTEGRITY='sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg=='

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# The verified tarball and the source tree (SRC_CACHE) serve every target; CACHE holds the
# target's build tree and binary.
SRC_CACHE="${FLEETGATE_LLAMA_CACHE:-$ROOT/.cache/llama}"
CACHE="$SRC_CACHE"
[ "$target" = aarch64 ] && CACHE="${FLEETGATE_LLAMA_AARCH64_CACHE:-$ROOT/.cache/llama-aarch64}"
JOBS="${FLEETGATE_LLAMA_JOBS:-$(nproc)}"
NICE=()
[ "$target" = aarch64 ] && NICE=(nice -n "${FLEETGATE_LLAMA_NICE:-19}")
TOOLCHAIN="$ROOT/scripts/cross/aarch64-linux-gnu.cmake"
ARM_ARCH="${FLEETGATE_LLAMA_ARM_ARCH:-armv8.2-a+dotprod+i8mm+fp16}"

# Everything that changes the binary goes into the stamp, so changing a flag here rebuilds.
# GGML_NATIVE=OFF: the cache may outlive the CPU it was built on (a restored VM snapshot, a copied
# folder), and -march=native would then die with SIGILL. On x86-64 CPUs with AVX2 and FMA those
# (with AVX and F16C) are enabled explicitly instead; FLEETGATE_LLAMA_NATIVE=1 builds for exactly
# this CPU (what a phone building its own llama-server wants).
CMAKE_FLAGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_CURL=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=ON
  -DGGML_OPENMP=OFF
  -DGGML_CCACHE=OFF
)
if [ "$target" = aarch64 ]; then
  # llama-server needs nothing but glibc and libstdc++, which come with the cross compiler: its
  # own root is the sysroot (the project's arm64 sysroot is for the agent's libraries).
  CMAKE_FLAGS+=(-DGGML_NATIVE=OFF "-DGGML_CPU_ARM_ARCH=$ARM_ARCH"
    -DFLEETGATE_AARCH64_SYSROOT=/usr/aarch64-linux-gnu)
  # What a phone runs: ggml (the kernels) at -O3, the rest at -O2 rather than -O3. ggml was 7% of
  # this build's compile time and everything else 93% (llama's model graphs 42%, mtmd 19%,
  # common 16%, the server 13%: ninja's log of a fresh build); -O2 is what Debian builds release
  # code with, and the phone's time goes to the kernels.
  CMAKE_FLAGS+=("-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" "-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG"
    "-DCMAKE_PROJECT_ggml_INCLUDE=$ROOT/scripts/llama/ggml-O3.cmake")
elif [ "${FLEETGATE_LLAMA_NATIVE:-0}" = 1 ]; then
  # Built where it runs (a phone, in Termux): every instruction set of this CPU.
  CMAKE_FLAGS+=(-DGGML_NATIVE=ON)
else
  CMAKE_FLAGS+=(-DGGML_NATIVE=OFF)
  if [ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    CMAKE_FLAGS+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
  fi
  # This machine's llama-server serves the tests and local trials: everything but ggml (where
  # the kernels are, still -O3: ggml-O3.cmake) at -O1, which takes 35-60% less time to compile
  # (measured on llama-model.cpp 11.8 -> 7.4 s, arg.cpp 20.1 -> 13.2 s, clip.cpp 20.3 -> 8.4 s)
  # and a fresh machine builds it once. The phones' aarch64 build: -O2 there, ggml -O3 (above).
  CMAKE_FLAGS+=("-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG"
    "-DCMAKE_PROJECT_ggml_INCLUDE=$ROOT/scripts/llama/ggml-O3.cmake")
fi
STAMP_TEXT="node-llama-cpp@$NODE_LLAMA_CPP_VERSION ${CMAKE_FLAGS[*]}"
# By content: every checkout sharing the cache agrees on the stamp.
[[ "${CMAKE_FLAGS[*]}" == *ggml-O3.cmake* ]] && STAMP_TEXT="${STAMP_TEXT//$ROOT\/scripts\/llama\/ggml-O3.cmake/ggml-O3.cmake:$(sha256sum "$ROOT/scripts/llama/ggml-O3.cmake" | cut -c1-16)}"
TOOLCHAIN_FLAGS=()
if [ "$target" = aarch64 ]; then
  command -v aarch64-linux-gnu-g++ >/dev/null ||
    die "aarch64-linux-gnu-g++ not found (Debian package g++-aarch64-linux-gnu)"
  # The toolchain by content, not by path: every checkout sharing the cache agrees on the stamp.
  TOOLCHAIN_FLAGS=("-DCMAKE_TOOLCHAIN_FILE=$TOOLCHAIN")
  STAMP_TEXT+=" toolchain:$(sha256sum "$TOOLCHAIN" | cut -c1-16) $(aarch64-linux-gnu-g++ -dumpfullversion)"
fi

BIN="$CACHE/bin/llama-server"
STAMP="$CACHE/bin/llama-server.stamp"
up_to_date() { [ -x "$BIN" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_TEXT" ]; }

if [ "$force" -eq 0 ] && up_to_date; then
  say "llama-server ($target, node-llama-cpp@$NODE_LLAMA_CPP_VERSION) is up to date: $BIN"
  exit 0
fi

mkdir -p "$CACHE"
# Two builds at once (./fleet test in two terminals) would trample each other's tree.
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  say "another build holds $CACHE/.lock; waiting for it"
  flock 9
  if [ "$force" -eq 0 ] && up_to_date; then
    say "llama-server is up to date (built by the other run): $BIN"
    exit 0
  fi
fi

T0=$(now)
if [ "$clean" -eq 1 ] && [ "$target" = aarch64 ]; then
  say "cleaning $CACHE (the aarch64 build; the source in $SRC_CACHE stays)"
  rm -rf "${CACHE:?}/build" "${CACHE:?}/bin"
elif [ "$clean" -eq 1 ]; then
  say "cleaning $CACHE (keeping the downloaded tarball)"
  rm -rf "${CACHE:?}/src" "${CACHE:?}/build" "${CACHE:?}/bin"
fi
# A cross build also holds the source cache's lock while it fetches and extracts the source.
if [ "$CACHE" != "$SRC_CACHE" ]; then
  mkdir -p "$SRC_CACHE"
  exec 8>"$SRC_CACHE/.lock"
  flock -n 8 || { say "another build holds $SRC_CACHE/.lock; waiting for it"; flock 8; }
fi

# 1. The tarball, verified.
TGZ="$SRC_CACHE/dl/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz"
sri_sha512() {
  if command -v openssl >/dev/null; then
    printf 'sha512-%s' "$(openssl dgst -sha512 -binary "$1" | base64 -w0)"
  else
    printf 'sha512-%s' "$(sha512sum "$1" | cut -d' ' -f1 | xxd -r -p | base64 -w0)"
  fi
}
if [ ! -f "$TGZ" ] || [ "$(sri_sha512 "$TGZ")" != "$NODE_LLAMA_CPP_INTEGRITY" ]; then
  t=$(now)
  say "fetching node-llama-cpp@$NODE_LLAMA_CPP_VERSION (npm pack)"
  mkdir -p "$SRC_CACHE/dl"
  rm -f "$TGZ"
  (cd "$SRC_CACHE/dl" && npm pack "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" --silent \
    --pack-destination "$SRC_CACHE/dl" >/dev/null)
  [ -f "$TGZ" ] || die "npm pack did not produce $TGZ"
  say "fetched in $(since "$t")"
fi
got="$(sri_sha512 "$TGZ")"
if [ "$got" != "$NODE_LLAMA_CPP_INTEGRITY" ]; then
  mv -f "$TGZ" "$TGZ.rejected"
  die "integrity check failed for $TGZ (kept as .rejected): expected $NODE_LLAMA_CPP_INTEGRITY, got $got"
fi
say "tarball integrity verified ($NODE_LLAMA_CPP_INTEGRITY)"

# 2. The llama.cpp source, cloned from the bundle inside the tarball.
SRC="$SRC_CACHE/src"
SRC_STAMP="$SRC_CACHE/src.stamp"
if [ ! -f "$SRC/CMakeLists.txt" ] || [ ! -d "$SRC/tools/server" ] || [ ! -f "$SRC_STAMP" ] ||
  [ "$(cat "$SRC_STAMP")" != "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" ]; then
  t=$(now)
  say "extracting llama.cpp's source from package/llama/gitRelease.bundle"
  tmp="$(mktemp -d "$SRC_CACHE/.extract.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$TGZ" -C "$tmp" package/llama/gitRelease.bundle
  rm -rf "$SRC" "$SRC_STAMP" "$SRC_CACHE/build"
  git -c advice.detachedHead=false clone --quiet "$tmp/package/llama/gitRelease.bundle" "$SRC"
  rm -rf "$tmp"
  trap - EXIT
  echo "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >"$SRC_STAMP"
  say "source ready in $(since "$t") ($(git -C "$SRC" log -1 --format='%h %cs %s' 2>/dev/null || echo '?'))"
fi
[ "$CACHE" = "$SRC_CACHE" ] || exec 8>&-

# 3. The build: CPU only, target llama-server only, offline.
BUILD="$CACHE/build"
generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Relative paths in ccache's keys: another clone of the project hits the same cache entries.
  # (A cross build's source and build trees are in two caches: their common parent.)
  export CCACHE_BASEDIR="$CACHE"
  [ "$CACHE" = "$SRC_CACHE" ] || CCACHE_BASEDIR="$(dirname "$CACHE")"
  export CCACHE_NOHASHDIR=1
  ccache -z >/dev/null 2>&1 || true
else
  say "ccache not found: a rebuild will take as long as the first build"
fi
# (A cache shared by several checkouts may name the toolchain file of one that is gone.)
# (The same for the ggml include file.)
toolchain_gone() {
  local f key
  for key in CMAKE_TOOLCHAIN_FILE CMAKE_PROJECT_ggml_INCLUDE; do
    f="$(sed -n "s/^$key:[A-Z]*=//p" "$BUILD/CMakeCache.txt" 2>/dev/null)"
    if [ -n "$f" ] && [ ! -f "$f" ]; then
      return 0
    fi
  done
  return 1
}
if [ "$force" -eq 1 ] || [ ! -f "$BUILD/CMakeCache.txt" ] || [ ! -f "$BUILD/.flags" ] ||
  [ "$(cat "$BUILD/.flags")" != "$STAMP_TEXT" ] || toolchain_gone; then
  rm -rf "$BUILD"
  t=$(now)
  say "configuring (cmake ${CMAKE_FLAGS[*]} ${TOOLCHAIN_FLAGS[*]})"
  cmake -S "$SRC" -B "$BUILD" "${generator[@]}" "${CMAKE_FLAGS[@]}" "${TOOLCHAIN_FLAGS[@]}" "${launcher[@]}" \
    >"$CACHE/configure.log" 2>&1 || { tail -40 "$CACHE/configure.log" >&2; die "cmake configure failed (log: $CACHE/configure.log)"; }
  echo "$STAMP_TEXT" >"$BUILD/.flags"
  say "configured in $(since "$t")"
fi
t=$(now)
say "building llama-server ($target) with $JOBS jobs (about 5 minutes on 2 cores the first time; seconds with a warm ccache)"
"${NICE[@]}" cmake --build "$BUILD" --target llama-server --parallel "$JOBS" >"$CACHE/build.log" 2>&1 ||
  { tail -40 "$CACHE/build.log" >&2; die "build failed (log: $CACHE/build.log)"; }
say "built in $(since "$t")"
if command -v ccache >/dev/null; then
  hits="$(ccache --print-stats 2>/dev/null | awk -F'\t' '$1=="direct_cache_hit"||$1=="preprocessed_cache_hit"{h+=$2} $1=="cache_miss"{m+=$2} END{printf "%d hits, %d misses", h, m}')"
  [ -n "$hits" ] && say "ccache: $hits"
fi

built="$(find "$BUILD" -type f -name llama-server -perm -u+x | head -1)"
[ -n "$built" ] || die "no llama-server binary under $BUILD"
mkdir -p "$CACHE/bin"
cp -f "$built" "$BIN.tmp"
mv -f "$BIN.tmp" "$BIN"
# A cross-built binary runs here under user-mode emulation when qemu-user-static is installed.
run=("$BIN")
if [ "$target" = aarch64 ]; then
  readelf -h "$BIN" | grep -q 'Machine:.*AArch64' && ! readelf -l "$BIN" | grep -q INTERP ||
    die "$BIN is not a static aarch64 executable (readelf -hl $BIN)"
  run=()
  command -v qemu-aarch64-static >/dev/null && run=(qemu-aarch64-static "$BIN")
fi
if [ ${#run[@]} -gt 0 ]; then
  "${run[@]}" --version >/dev/null 2>&1 || die "$BIN does not run"
fi
echo "$STAMP_TEXT" >"$STAMP"
version="$([ ${#run[@]} -gt 0 ] && "${run[@]}" --version 2>&1 | grep -m1 -i version || true)"
say "llama-server ($target) ready: $BIN ($version); total $(since "$T0")"
