"""Command-line tools over the library, which nothing in the library imports: the
ccompress-perf sweep (perf), the ccompress-fidelity measurements (fidelity), build
information as ccompress-info (info), and the CCOMPRESS_TRACE summary (trace). The error
bounds, the cost model and the Adam error measures moved to :mod:`ccompress.bounds`,
:mod:`ccompress.perfmodel` and :mod:`ccompress.adam_fidelity`; their old paths here warn."""
