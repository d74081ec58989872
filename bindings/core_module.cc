// ccompress._core: the CPU module. Always built; needs no GPU, CUDA or MPI.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "error_translator.h"
#include "ccompress/common.h"
#include "cpu/isa_dispatch.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  using namespace ccompress::py_bindings;
  m.doc() = "ccompress C++ core (CPU backend, in-process transport, collectives)";
  register_error_translator();
  m.attr("__version__") = ccompress::version();
  bind_codec_math(m);
  bind_collectives(m);
  bind_py_transport(m);
  bind_tcp_transport(m);
  m.def("cpu_isa", &ccompress::cpu_isa,
        "Which copy of the host codec loops runs: 'avx2' (the CPU has AVX2) or 'baseline' "
        "(SSE2, or forced with CCOMPRESS_CPU_ISA=baseline). Both give the same bits.");
}
