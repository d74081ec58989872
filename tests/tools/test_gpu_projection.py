"""perf/model/gpu_projection.py reads the kernel rates perf/bench/gpu_bench.py writes
(kernels.json: {"device", ..., "kernels": [{"codec", "kernel", "dtype", "gbps"}], ...}),
says so when the file is missing (datasheet rates, marked), and refuses a file of another
shape. (tests/cuda/test_cuda_emulator.py runs it on a kernels.json the benchmark wrote.)"""
import json

import pytest

from perf.model import gpu_projection as gp


def test_missing_kernels_file_is_said_and_rows_are_datasheet(tmp_path, capsys):
    assert gp.main(["--kernels", str(tmp_path / "kernels.json")]) == 0
    out, err = capsys.readouterr()
    assert "is missing: no GPU has measured the kernels yet" in err
    assert "datasheet" in out and " measured" not in out


def test_measured_bfloat16_rates_replace_the_datasheet_ones(tmp_path, capsys):
    rows = [{"codec": c, "kernel": k, "dtype": d, "gbps": 2000.0}
            for c in ("fp8_e4m3:g128", "mxfp4") for k in ("encode", "decode_accumulate")
            for d in ("bfloat16", "float32")]
    doc = {"device": "NVIDIA H100", "driver": "1", "commit": "abc", "date": "today",
           "copy_gbps": 3000.0, "kernels": rows, "pipeline": [],
           "alltoall": [{"codec": "nvfp4", "mib": 8.0, "ranks": 4, "ms": 1.0, "alone_ms": 0.5}]}
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps(doc))
    costs = {c.name: c for c in gp.codec_costs(str(path))}
    assert costs["fp8_e4m3:g128"].source == "measured" and costs["mxfp4"].source == "measured"
    assert costs["hint8"].source != "measured"  # not in the file: datasheet
    assert "NVIDIA H100" in capsys.readouterr().err


def test_a_file_of_another_shape_is_refused(tmp_path):
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps([{"codec": "hint8", "kernel": "encode", "gbs": 1.0}]))
    with pytest.raises(SystemExit, match="not a kernels.json"):
        gp.codec_costs(str(path))
