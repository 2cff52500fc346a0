#!/usr/bin/env bash
# Makes the project-local arm64 sysroot that the aarch64 builds link against (the toolchain file
# scripts/cross/aarch64-linux-gnu.cmake points CMake at it).
#
#   scripts/cross/sysroot.sh            make it when needed (a no-op when up to date)
#   scripts/cross/sysroot.sh --refresh  re-read Debian's package lists now (rebuilds the sysroot
#                                       only if a version changed)
#   scripts/cross/sysroot.sh --clean    forget everything and start again
#   scripts/cross/sysroot.sh --print    as without, then print the sysroot's path on stdout
#
# What is in it: Debian's arm64 packages of the libraries fleetgate-agent links (OpenSSL,
# yaml-cpp, Boost's headers, nlohmann/json), unpacked with `dpkg-deb -x`, never installed: a
# multiarch install of libyaml-cpp-dev:arm64 or prometheus-cpp-dev:arm64 would remove the amd64
# ones. Debian ships prometheus-cpp as shared libraries only, so its core library is built here,
# statically, from Debian's source package of the same release. glibc and libstdc++ come with the
# cross compiler (g++-aarch64-linux-gnu).
#
# Where the packages come from: apt itself, with a private state folder (.cache/sysroot-arm64/apt:
# its own lists for arm64 and Debian's sources, so the machine's dpkg architectures and package
# lists are left alone), verified as apt verifies everything (signed Release files, hashed
# packages). The lists are re-read when older than FLEETGATE_SYSROOT_MAX_AGE_DAYS (default 7: a
# static binary carries its OpenSSL, so security updates must reach it) or with --refresh; the
# sysroot is rebuilt only when the package list, a version or this recipe changed. Without network
# an existing sysroot is kept (with a warning).
#
# Result: $FLEETGATE_SYSROOT_CACHE/root (default .cache/sysroot-arm64/root) and root.stamp (the
# recipe's hash and every package=version).
# Needs: apt-get, dpkg-deb, dpkg-source, g++-aarch64-linux-gnu, cmake, ninja (or make), flock;
# ccache when present.
set -euo pipefail

# Unpacked as they are (headers, static archives, CMake package files).
DEB_PACKAGES=(libssl-dev libyaml-cpp-dev libboost1.81-dev nlohmann-json3-dev)
# Built from Debian's source package: only shared libraries in the binary package.
SOURCE_PACKAGES=(prometheus-cpp)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${FLEETGATE_SYSROOT_CACHE:-$ROOT/.cache/sysroot-arm64}"
MAX_AGE_DAYS="${FLEETGATE_SYSROOT_MAX_AGE_DAYS:-7}"
TOOLCHAIN="$ROOT/scripts/cross/aarch64-linux-gnu.cmake"
SYSROOT="$CACHE/root"
STAMP="$CACHE/root.stamp"
APT_DIR="$CACHE/apt"
FRESH="$APT_DIR/lists.fresh" # touched whenever the lists were read successfully

say() { printf '\033[1m[sysroot]\033[0m %s\n' "$*" >&2; }
die() { printf '[sysroot] error: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

refresh=0 clean=0 print=0
for arg in "$@"; do
  case "$arg" in
    --refresh) refresh=1 ;;
    --clean) clean=1 ;;
    --print) print=1 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) die "unknown argument '$arg' (try --help)" ;;
  esac
done

for tool in apt-get apt-cache dpkg-deb dpkg-source aarch64-linux-gnu-g++ cmake flock; do
  command -v "$tool" >/dev/null || die "$tool not found (./fleet build --target aarch64 installs what is needed)"
done

# The recipe: this script, the toolchain file and the compiler. Changing any of them rebuilds.
recipe="$(cat "$0" "$TOOLCHAIN" | sha256sum | cut -c1-16) $(aarch64-linux-gnu-g++ -dumpfullversion)"
ready() {
  [ "$print" -eq 0 ] || echo "$SYSROOT"
  exit 0
}
stamp_recipe() { [ -f "$STAMP" ] && head -1 "$STAMP"; }
lists_fresh() { [ -f "$FRESH" ] && [ -n "$(find "$FRESH" -mmin -$((MAX_AGE_DAYS * 1440)))" ]; }

if [ "$clean" -eq 0 ] && [ "$refresh" -eq 0 ] && [ -d "$SYSROOT" ] &&
  [ "$(stamp_recipe)" = "recipe $recipe" ] && lists_fresh; then
  say "arm64 sysroot is up to date: $SYSROOT"
  ready
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  say "another run holds $CACHE/.lock; waiting for it"
  flock 9
fi
T0=$(now)
if [ "$clean" -eq 1 ]; then
  say "cleaning $CACHE"
  rm -rf "${CACHE:?}/root" "${CACHE:?}/root.new" "${CACHE:?}/apt" "$STAMP"
fi

# apt with its own state: arm64 binary lists and source lists of this Debian release, the
# machine's apt.conf.d (proxies, mirrors) still applies.
papt() {
  local tool="$1"
  shift
  "$tool" -q -o Dir::State="$APT_DIR/state" -o Dir::State::Lists="$APT_DIR/lists" \
    -o Dir::State::status="$APT_DIR/status" -o Dir::Cache="$APT_DIR/cache" \
    -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$APT_DIR/sources.list.d" \
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$APT_DIR/preferences.d" \
    -o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o Acquire::Languages=none \
    -o APT::Sandbox::User=root "$@"
}
codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
[ -n "$codename" ] || die "cannot tell the Debian release (no VERSION_CODENAME in /etc/os-release)"
mirror="${FLEETGATE_SYSROOT_MIRROR:-http://deb.debian.org}"
mkdir -p "$APT_DIR"/{state,lists/partial,cache/archives/partial,sources.list.d,preferences.d,debs,src}
touch "$APT_DIR/status"
cat >"$APT_DIR/sources.list.d/debian.sources" <<EOF
Types: deb deb-src
URIs: $mirror/debian
Suites: $codename $codename-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: $mirror/debian-security
Suites: $codename-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF

if [ "$refresh" -eq 1 ] || ! lists_fresh || [ ! -d "$SYSROOT" ]; then
  t=$(now)
  say "reading Debian's arm64 package lists ($codename, private apt state in ${APT_DIR#"$ROOT"/})"
  if papt apt-get update >"$CACHE/apt-update.log" 2>&1 && ! grep -q '^E: ' "$CACHE/apt-update.log"; then
    touch "$FRESH"
    say "lists read in $(since "$t")"
  elif [ -d "$SYSROOT" ] && [ "$(stamp_recipe)" = "recipe $recipe" ]; then
    say "warning: could not read the package lists (log: $CACHE/apt-update.log); keeping the sysroot as it is"
    ready
  else
    tail -20 "$CACHE/apt-update.log" >&2
    die "apt-get update failed for the arm64 lists (log: $CACHE/apt-update.log)"
  fi
fi

# What the sysroot would be made of now.
want="recipe $recipe"
for pkg in "${DEB_PACKAGES[@]}"; do
  ver="$(papt apt-cache policy "$pkg" | awk '$1 == "Candidate:" { print $2 }')"
  [ -n "$ver" ] && [ "$ver" != "(none)" ] || die "no arm64 package $pkg in the lists"
  want+=$'\n'"$pkg=$ver"
done
for pkg in "${SOURCE_PACKAGES[@]}"; do
  ver="$(papt apt-cache showsrc --only-source "$pkg" | awk '$1 == "Version:" { print $2 }' | sort -V | tail -1)"
  [ -n "$ver" ] || die "no source package $pkg in the lists"
  want+=$'\n'"src:$pkg=$ver"
done
if [ -d "$SYSROOT" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  say "arm64 sysroot is up to date (same packages and versions): $SYSROOT"
  ready
fi

# Download (apt checks every file against the signed lists) and unpack.
t=$(now)
mapfile -t debs < <(printf '%s\n' "$want" | grep -v -e '^recipe ' -e '^src:')
say "downloading ${debs[*]}"
rm -f "$APT_DIR"/debs/*.deb
(cd "$APT_DIR/debs" && papt apt-get download "${debs[@]}" >"$CACHE/download.log" 2>&1) ||
  { tail -20 "$CACHE/download.log" >&2; die "apt-get download failed (log: $CACHE/download.log)"; }
NEW="$CACHE/root.new"
rm -rf "$NEW"
mkdir -p "$NEW"
for deb in "$APT_DIR"/debs/*.deb; do
  dpkg-deb -x "$deb" "$NEW"
done
# Shared objects would only tempt the linker (their runtime packages are not here); docs are
# dead weight.
find "$NEW" \( -name '*.so' -o -name '*.so.*' \) -delete
rm -rf "$NEW/usr/share/doc" "$NEW/usr/share/man" "$NEW/usr/share/lintian"

# yaml-cpp's CMake package names its shared library; point it at the static archive of the same
# package (libyaml-cpp.a) so that `yaml-cpp` links statically.
ycfg="$NEW/usr/lib/aarch64-linux-gnu/cmake/yaml-cpp"
sed -i 's/add_library(yaml-cpp SHARED IMPORTED)/add_library(yaml-cpp STATIC IMPORTED)/' "$ycfg/yaml-cpp-targets.cmake"
sed -i -e 's/libyaml-cpp\.so\.[0-9.]*"/libyaml-cpp.a"/g' -e '/IMPORTED_SONAME_/d' "$ycfg"/yaml-cpp-targets-*.cmake
grep -q 'add_library(yaml-cpp STATIC IMPORTED)' "$ycfg/yaml-cpp-targets.cmake" &&
  ! grep -q 'libyaml-cpp\.so' "$ycfg"/yaml-cpp-targets*.cmake ||
  die "yaml-cpp's CMake files are not what this script expects (look at $ycfg)"
say "unpacked in $(since "$t")"

# prometheus-cpp's core, static, from Debian's source package (patches applied by dpkg-source).
generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$CACHE" CCACHE_NOHASHDIR=1
fi
for entry in $(printf '%s\n' "$want" | sed -n 's/^src://p'); do
  pkg="${entry%%=*}" ver="${entry#*=}"
  t=$(now)
  say "building $pkg $ver (static, aarch64) from Debian's source package"
  rm -rf "$APT_DIR/src" && mkdir -p "$APT_DIR/src"
  (cd "$APT_DIR/src" && papt apt-get source --download-only "$pkg=$ver" >"$CACHE/source.log" 2>&1 &&
    dpkg-source --no-check -x ./*.dsc "$pkg" >>"$CACHE/source.log" 2>&1) ||
    { tail -20 "$CACHE/source.log" >&2; die "could not fetch or unpack the source of $pkg (log: $CACHE/source.log)"; }
  case "$pkg" in
    prometheus-cpp)
      flags=(-DENABLE_PULL=OFF -DENABLE_PUSH=OFF -DENABLE_COMPRESSION=OFF -DENABLE_TESTING=OFF
        -DUSE_THIRDPARTY_LIBRARIES=OFF -DGENERATE_PKGCONFIG=OFF) ;;
    *) die "no build recipe for $pkg" ;;
  esac
  bdir="$APT_DIR/src/build"
  nice -n 19 cmake -S "$APT_DIR/src/$pkg" -B "$bdir" "${generator[@]}" "${launcher[@]}" \
    -DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" -DFLEETGATE_AARCH64_SYSROOT="$NEW" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF "${flags[@]}" \
    -DCMAKE_INSTALL_PREFIX="$NEW/usr" -DCMAKE_INSTALL_LIBDIR=lib/aarch64-linux-gnu \
    >"$CACHE/$pkg.log" 2>&1 &&
    nice -n 19 cmake --build "$bdir" --parallel "$(nproc)" >>"$CACHE/$pkg.log" 2>&1 &&
    cmake --install "$bdir" >>"$CACHE/$pkg.log" 2>&1 ||
    { tail -30 "$CACHE/$pkg.log" >&2; die "building $pkg failed (log: $CACHE/$pkg.log)"; }
  rm -rf "$bdir"
  say "$pkg built in $(since "$t")"
done

for f in usr/lib/aarch64-linux-gnu/libssl.a usr/lib/aarch64-linux-gnu/libcrypto.a \
  usr/lib/aarch64-linux-gnu/libyaml-cpp.a usr/lib/aarch64-linux-gnu/libprometheus-cpp-core.a \
  usr/include/boost/version.hpp usr/include/nlohmann/json.hpp \
  usr/include/aarch64-linux-gnu/openssl/opensslconf.h; do
  [ -f "$NEW/$f" ] || die "the new sysroot lacks $f"
done
rm -rf "$SYSROOT.old"
[ -d "$SYSROOT" ] && mv "$SYSROOT" "$SYSROOT.old"
mv "$NEW" "$SYSROOT"
rm -rf "$SYSROOT.old"
printf '%s\n' "$want" >"$STAMP"
say "arm64 sysroot ready: $SYSROOT ($(du -sh "$SYSROOT" | cut -f1)); total $(since "$T0")"
ready
