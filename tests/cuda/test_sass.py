"""The codec kernels' machine code (SASS for sm_80, the architecture CI builds), read with
cuobjdump from the nvcc-built ``_cuda`` module: what a kernel must look like to run at memory
speed, checked without a GPU. Every codec kernel (cuda/src/codecs/*/*_kernels.cu, *.cuh and
cuda/src/kernels/elementwise_kernels.cu) must

- load its input with 64- or 128-bit global loads (LDG.E.64 / LDG.E.128): the wide form is
  present (a scalar path for a run's unaligned tail may sit beside it);
- store its codes (encoders) with stores of at least 32 bits: no 8- or 16-bit global store;
- write its output (decoders, element-wise kernels) with at least one 64- or 128-bit store;
- spill nothing to local memory (no LDL / STL).

A kernel that cannot, for a reason stated below, is listed in EXCEPTIONS with that reason;
the test fails when it starts to pass (the entry must go), so the list only shrinks.

Skips where the ``_cuda`` module was not built with nvcc (the CPU emulator build has no device
code) or cuobjdump is missing (it comes with the test extras: ``nvidia-cuda-cuobjdump``,
``nvidia-cuda-nvdisasm``); under CI (``CI=true``) a missing cuobjdump fails instead.

``python tests/cuda/test_sass.py`` prints the table: per kernel, the widest global load, the
narrowest and widest global store, and spills (the range over its instances)."""
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ARCH = "sm_80"

# Every codec kernel, by name, and what it writes: "codes" (an encoder: wire codes, scales),
# "values" (a decoder or element-wise kernel: fp32 / bf16 / fp16 values), "count" (a
# reduction: only a counter or a scale), "finalize" (one thread turns an amax into a scale:
# no input array, only the spill rule applies).
KERNELS = {
    # casts and the element-wise helpers (kernels/elementwise_kernels.cu)
    "cast_kernel": "values",
    "accumulate_kernel": "values",
    "count_nonfinite_kernel": "count",
    "feedback_residual_kernel": "values",
    # fp8_* (codecs/fp8/fp8_kernels.cu)
    "fp8_encode_kernel": "codes",
    "fp8_encode_any_group_kernel": "codes",
    "fp8_decode_kernel": "values",
    # hint8 (codecs/hint8/hint8_kernels.cu)
    "hint8_encode_kernel": "codes",
    "hint8_decode_kernel": "values",
    # taco (codecs/taco/taco_kernels.cu)
    "taco_encode_kernel": "codes",
    "taco_decode_kernel": "values",
    # the 4-bit families nvfp4, hnvfp4, hint4 (codecs/fourbit/fourbit_kernels.cuh)
    "fourbit::encode_kernel": "codes",
    "fourbit::decode_kernel": "values",
    # mxfp8*, mxfp4 (codecs/mxfp8/mx_kernels.cuh)
    "mx::encode_kernel": "codes",
    "mx::decode_kernel": "values",
}

# kernel -> {rule: why it does not hold}. Rules: "wide_load", "code_store", "wide_store",
# "no_spill".
EXCEPTIONS = {
    "hint8_encode_kernel": {
        "code_store": "s8 scale bytes at the unaligned ends of a block's run of them (and all "
                      "of them where groups are shorter than a lane's run), and the codes of a "
                      "run's tail blocks shorter than 128, one byte each; whole blocks store "
                      "their codes, and 4 groups' s8 bytes, as 32-bit words"},
}


def _cuobjdump():
    """The cuobjdump binary: on PATH, or where the nvidia-cuda-cuobjdump wheel puts it
    (nvidia/<cuXY or cuda_cuobjdump>/bin/), or None."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob("*/bin/cuobjdump")):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def _cuda_module():
    """(path of the nvcc-built _cuda module, None) or (None, why there is none)."""
    try:
        from ccompress import _build_config
    except ImportError:
        return None, "ccompress is not built"
    if not getattr(_build_config, "CUDA_BUILT", False):
        return None, f"the _cuda module was not built with nvcc ({_build_config.CUDA_STATUS})"
    spec = importlib.util.find_spec("ccompress._cuda")
    if spec is None or not spec.origin:
        return None, "ccompress._cuda not found"
    return spec.origin, None


_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def _width(opcode):
    """Bits moved by a global load or store opcode (LDG.E.U8 -> 8, LDG.E.128 -> 128, ...)."""
    parts = set(opcode.split(".")[1:])
    for bits, tags in ((8, {"U8", "S8"}), (16, {"U16", "S16"}), (64, {"64"}), (128, {"128"})):
        if parts & tags:
            return bits
    return 32


@functools.lru_cache(maxsize=None)
def sass_functions(module, tool):
    """{mangled kernel name: [opcode, ...]} of the module's sm_80 code."""
    env = dict(os.environ, PATH=os.path.dirname(tool) + os.pathsep + os.environ.get("PATH", ""))
    out = subprocess.run([tool, "-sass", "-arch", ARCH, module], env=env, check=True,
                         capture_output=True, text=True).stdout
    functions, current = {}, None
    for line in out.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = functions.setdefault(m.group(1), [])
            continue
        m = _INSTR.search(line)
        if m and current is not None:
            current.append(m.group(1))
    return functions


def summarize(opcodes):
    """Widest load, narrowest / widest store (bits, 0 if none), spills (LDL / STL count)."""
    loads = [_width(o) for o in opcodes if o.startswith("LDG.")]
    stores = [_width(o) for o in opcodes if o.startswith("STG.")]
    spills = sum(1 for o in opcodes if o.split(".")[0] in ("LDL", "STL"))
    return {"widest_load": max(loads, default=0), "narrowest_store": min(stores, default=0),
            "widest_store": max(stores, default=0), "spills": spills}


def violations(role, s):
    """The rules a kernel of @p role with summary @p s breaks."""
    bad = set()
    if role != "finalize" and s["widest_load"] < 64:
        bad.add("wide_load")
    if role == "codes" and 0 < s["narrowest_store"] < 32:
        bad.add("code_store")
    if role == "values" and s["widest_store"] < 64:
        bad.add("wide_store")
    if s["spills"]:
        bad.add("no_spill")
    return bad


def kernel_name(mangled):
    """The kernel's name in a mangled name of namespace ccompress::cuda, with the namespaces
    below that one ("fp8_encode_kernel", "mx::encode_kernel"; anonymous ones left out), or
    None."""
    prefix = "_ZN9ccompress4cuda"
    if not mangled.startswith(prefix):
        return None
    pos, parts = len(prefix), []
    while True:
        m = re.match(r"\d+", mangled[pos:])
        if not m:
            return "::".join(parts) or None
        length, pos = int(m.group()), pos + m.end()
        part, pos = mangled[pos:pos + length], pos + length
        if not part.startswith("_GLOBAL__N"):
            parts.append(part)


def kernel_instances(functions):
    """{kernel name: {mangled instantiation: summary}} for the kernels of this module."""
    out = {}
    for mangled, opcodes in functions.items():
        name = kernel_name(mangled)
        if name and name.endswith("_kernel"):
            out.setdefault(name, {})[mangled] = summarize(opcodes)
    return out


def _demangle(names):
    tool = shutil.which("c++filt")
    if not tool:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout
    return dict(zip(names, out.splitlines()))


@pytest.fixture(scope="module")
def kernels():
    module, why = _cuda_module()
    if module is None:
        pytest.skip(why)
    tool = _cuobjdump()
    if tool is None:
        msg = "cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    found = kernel_instances(sass_functions(module, tool))
    assert found, f"no kernel found in the {ARCH} code of {module}"
    return found


def test_every_codec_kernel_is_listed(kernels):
    """Every kernel (``*_kernel`` in ccompress::cuda) is classified in KERNELS, so that it is
    checked, and every kernel of KERNELS is in the code (not renamed away from its check)."""
    unknown = [k for k in kernels if k not in KERNELS]
    assert not unknown, f"kernels missing from KERNELS in {__file__}: {unknown}"
    missing = [k for k in KERNELS if k not in kernels]
    assert not missing, f"kernels of KERNELS not in the {ARCH} code (renamed?): {missing}"


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_sass(kernels, name):
    if name not in kernels:
        pytest.fail(f"{name} is not in the {ARCH} code")
    role, allowed = KERNELS[name], EXCEPTIONS.get(name, {})
    broken = {}
    for mangled, s in kernels[name].items():
        for rule in violations(role, s):
            broken.setdefault(rule, []).append((mangled, s))
    names = _demangle([m for v in broken.values() for m, _ in v])
    unexpected = [f"{rule}: {names[m]} {s}" for rule, v in broken.items() if rule not in allowed
                  for m, s in v]
    assert not unexpected, f"{name} breaks a SASS rule:\n  " + "\n  ".join(unexpected)
    stale = [rule for rule in allowed if rule not in broken]
    assert not stale, (f"{name} now keeps the rules {stale}: remove them from EXCEPTIONS "
                       f"in {__file__}")


def main():
    """Prints the table: per kernel, over its instances, the range (worst-best) of the widest
    global load, the narrowest store, the widest store and the spills, and the rules broken."""
    module, why = _cuda_module()
    tool = _cuobjdump()
    if module is None or tool is None:
        sys.exit(why or "cuobjdump not found")
    found = kernel_instances(sass_functions(module, tool))
    print("| kernel | instances | widest load | narrowest store | widest store | spills | "
          "rules broken |")
    print("|---|---|---|---|---|---|---|")
    for name in sorted(found):
        inst = list(found[name].values())
        role = KERNELS.get(name, "?")

        def span(key, best=max):
            lo, hi = min(s[key] for s in inst), max(s[key] for s in inst)
            worst, top = (lo, hi) if best is max else (hi, lo)
            return str(worst) if lo == hi else f"{worst}-{top}"

        broken = sorted(set().union(*(violations(role, s) for s in inst))) if role != "?" else "?"
        print(f"| {name} | {len(inst)} | {span('widest_load')} | {span('narrowest_store')} | "
              f"{span('widest_store')} | {span('spills', min)} | {', '.join(broken) or '-'} |")


if __name__ == "__main__":
    main()
