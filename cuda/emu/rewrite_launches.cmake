# Copies a CUDA source for the CPU emulator build, rewriting each kernel launch
# `kernel<<<grid, block, shared, stream>>>(args)` to `kernel % ::emu::Config{grid, block,
# shared, stream}(args)` (cuda/emu/cuda_runtime.h). A #line keeps diagnostics on the original.
# Usage: cmake -DIN=<source> -DOUT=<copy> -P rewrite_launches.cmake
file(READ "${IN}" text)
string(REPLACE "<<<" " % ::emu::Config{" text "${text}")
string(REPLACE ">>>" "}" text "${text}")
file(WRITE "${OUT}" "#line 1 \"${IN}\"\n${text}")
