// The CPU emulator's checks of itself (emu_selftest.cu): name -> passed.
#pragma once

#include <map>
#include <string>

namespace emu {
std::map<std::string, bool> selftest();
}  // namespace emu
