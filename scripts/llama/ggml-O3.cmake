# Included by llama.cpp's build right after ggml's project() (CMAKE_PROJECT_ggml_INCLUDE, set by
# scripts/llama/build.sh): ggml's directory keeps CMake's Release -O3. The host build compiles
# everything else (llama, common, the server, mtmd) at -O1, the phones' aarch64 build at -O2:
# that is where compile time goes, not run time (the tensor kernels are all in ggml). A normal
# variable here is scoped to ggml's directory and those below it.
set(CMAKE_C_FLAGS_RELEASE "-O3 -DNDEBUG")
set(CMAKE_CXX_FLAGS_RELEASE "-O3 -DNDEBUG")
