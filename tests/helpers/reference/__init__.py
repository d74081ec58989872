"""Reference implementations and test support shared by the test modules, so that no test
module imports another: NumPy references of the codec formats (taco, fourbit), and the
mpiexec launcher of the multi-process tests (mpiexec)."""
