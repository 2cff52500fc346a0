# CMake toolchain file: aarch64 Linux, Debian's cross compiler (g++-aarch64-linux-gnu), every
# program linked statically so that it runs in any aarch64 distro image (the Acurast Shell
# runtime's Termux proot-distro root filesystem, a Debian or Alpine container, a bare chroot).
#
# glibc and libstdc++ come with the cross compiler (its own /usr/aarch64-linux-gnu and
# /usr/lib/gcc-cross); the other libraries come from the project-local sysroot that
# scripts/cross/sysroot.sh unpacks from Debian's arm64 packages (default
# .cache/sysroot-arm64/root; override with -DFLEETGATE_AARCH64_SYSROOT=DIR or the environment
# variable of that name). Used by `./fleet build --target aarch64` and
# `scripts/llama/build.sh --target aarch64`.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

if(NOT FLEETGATE_AARCH64_SYSROOT)
  if(DEFINED ENV{FLEETGATE_AARCH64_SYSROOT})
    set(FLEETGATE_AARCH64_SYSROOT "$ENV{FLEETGATE_AARCH64_SYSROOT}")
  else()
    get_filename_component(FLEETGATE_AARCH64_SYSROOT "${CMAKE_CURRENT_LIST_DIR}/../../.cache/sysroot-arm64/root" ABSOLUTE)
  endif()
endif()
# try_compile projects (compiler checks, FindThreads) read this file again: give them the path.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES FLEETGATE_AARCH64_SYSROOT)

# Libraries, headers and CMake packages only from the sysroot (never the build machine's x86
# ones); programs (cmake, ninja, ccache) from the build machine.
set(CMAKE_FIND_ROOT_PATH "${FLEETGATE_AARCH64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Debian keeps arch-specific headers (openssl/opensslconf.h) in the multiarch folder, which the
# cross compiler does not search on its own.
if(EXISTS "${FLEETGATE_AARCH64_SYSROOT}/usr/include/aarch64-linux-gnu")
  set(CMAKE_C_STANDARD_INCLUDE_DIRECTORIES "${FLEETGATE_AARCH64_SYSROOT}/usr/include/aarch64-linux-gnu")
  set(CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES "${FLEETGATE_AARCH64_SYSROOT}/usr/include/aarch64-linux-gnu")
endif()

set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
set(OPENSSL_USE_STATIC_LIBS TRUE)
