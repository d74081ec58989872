"""Every documented import path works: where the code lives now, and the old paths, which
warn (DeprecationWarning) and hand on the same objects."""
import importlib
import subprocess
import sys

import pytest

# old path -> (new module, {name in the old module: name in the new one})
MOVED = {
    "ccompress.gift": ("ccompress.compressors.gift",
                       {"GIFT": "NumpyGIFT", "NumpyGIFT": "NumpyGIFT", "Kronecker": "Kronecker",
                        "Whitening": "Whitening", "nystrom": "nystrom",
                        "roundtrip_errors": "roundtrip_errors"}),
    "ccompress.tsr": ("ccompress.compressors.tsr", {"TSR": "TSR", "TSRStep": "TSRStep"}),
    "ccompress.tsr_adam": ("ccompress.compressors.tsr_adam",
                           {"TSRAdam": "NumpyTSRAdam", "NumpyTSRAdam": "NumpyTSRAdam",
                            "REFRESH_MODES": "REFRESH_MODES"}),
    "ccompress.powersgd": ("ccompress.compressors.powersgd", {"PowerSGD": "PowerSGD"}),
    "ccompress.tools.bounds": ("ccompress.bounds",
                               {"allreduce_error_bound": "allreduce_error_bound",
                                "hier_error_bound": "hier_error_bound",
                                "quantizations": "quantizations", "_wht": "_wht"}),
    "ccompress.tools.perfmodel": ("ccompress.perfmodel",
                                  {"AlgoModel": "AlgoModel", "load_codec_costs": "load_codec_costs",
                                   "CALIBRATION": "CALIBRATION", "System": "System"}),
    "ccompress.tools.adam_fidelity": ("ccompress.adam_fidelity",
                                      {"AdamPair": "AdamPair", "BETAS": "BETAS", "EPS": "EPS"}),
    "ccompress.compressors.error_feedback": ("ccompress.error_feedback",
                                             {"ErrorFeedback": "ErrorFeedback"}),
}

# Documented paths where the code lives (each with a name it must hold).
CURRENT = {
    "ccompress.bounds": "allreduce_error_bound", "ccompress.perfmodel": "AlgoModel",
    "ccompress.adam_fidelity": "AdamPair", "ccompress.error_feedback": "ErrorFeedback",
    "ccompress.compressors.gift": "NumpyGIFT", "ccompress.compressors.tsr": "TSR",
    "ccompress.compressors.tsr_adam": "NumpyTSRAdam", "ccompress.compressors.powersgd": "PowerSGD",
    "ccompress.tools.perf": "main", "ccompress.tools.fidelity": "main",
    "ccompress.tools.info": "main", "ccompress.tools.trace": "main", "ccompress": "build_info",
}


def _fresh(name):
    """Imports ``name`` anew (a module is imported once per process, and warns only then)."""
    sys.modules.pop(name, None)
    return importlib.import_module(name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_warns_and_hands_on_the_same_objects(old):
    new_name, names = MOVED[old]
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: import {new_name}"):
        mod = _fresh(old)
    new = importlib.import_module(new_name)
    for name, target in names.items():
        assert getattr(mod, name) is getattr(new, target), name
        assert name in dir(mod)
    with pytest.raises(AttributeError, match=f"module '{old}' has no attribute 'no_such_name'"):
        mod.no_such_name  # noqa: B018


def test_old_path_from_import_warns_at_the_importer(tmp_path):
    """``from ccompress.gift import GIFT`` in a user's script: the warning names the script's
    line (shown by default in __main__), and the class is the NumPy GIFT."""
    script = tmp_path / "old_user.py"
    script.write_text("from ccompress.gift import GIFT\n"
                      "from ccompress.compressors.gift import NumpyGIFT\n"
                      "assert GIFT is NumpyGIFT\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"{script}:1: DeprecationWarning: ccompress.gift is deprecated" in r.stderr, r.stderr


def test_current_paths_import_without_warning():
    """The documented paths where the code lives, and the library under them, take no
    deprecated path: a fresh interpreter (so that every module is imported anew) with every
    DeprecationWarning of ccompress an error. (ccompress.torch is left out: its backend files
    still import ErrorFeedback from ccompress.compressors.error_feedback, until they are split.)"""
    code = ("import importlib, warnings\n"
            "warnings.filterwarnings('error', category=DeprecationWarning, message='ccompress')\n"
            f"for name, attr in {CURRENT!r}.items():\n"
            "    assert hasattr(importlib.import_module(name), attr), (name, attr)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
