"""The command-line tools as a new user reads them: ccompress-fidelity prints one row per
codec for a single tensor (every schedule is the same at one rank) and says which tensors a
summary leaves out; ccompress-perf --help states each default once."""
import json

import numpy as np
import pytest

from ccompress.tools import fidelity, perf


def test_fidelity_single_tensor_one_row_per_codec(tmp_path, capsys):
    np.save(tmp_path / "w.npy", np.random.default_rng(0).standard_normal(3000).astype(np.float32))
    assert fidelity.main([str(tmp_path / "w.npy"), "-q"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln and not ln.startswith("#")]
    assert len(rows) == len(fidelity.DEFAULT_CODECS), out
    assert len(set(rows)) == len(rows), out


def test_fidelity_summary_names_what_it_leaves_out(tmp_path, capsys):
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "stack.npz", parts=rng.standard_normal((4, 512)).astype(np.float32))
    np.save(tmp_path / "single.npy", rng.standard_normal(512).astype(np.float32))
    rc = fidelity.main([str(tmp_path / "stack.npz"), str(tmp_path / "single.npy"), "--summary",
                        "--algo", "two_shot", "--json", str(tmp_path / "o.json")])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "# not in this summary (measured at fewer than 4 ranks): single" in out, out
    assert "leaves out 1 tensor(s)" in err and "single" in err, err
    doc = json.loads((tmp_path / "o.json").read_text())
    assert doc["summary"][0]["left_out"] == ["single"]
    # at one rank the single tensor is in the summary (its rows count for any schedule)
    rc = fidelity.main([str(tmp_path / "stack.npz"), str(tmp_path / "single.npy"), "--summary",
                        "--summary-ranks", "1", "--algo", "two_shot", "-q",
                        "--json", str(tmp_path / "o.json")])
    capsys.readouterr()
    s = json.loads((tmp_path / "o.json").read_text())["summary"][0]
    assert s["ranks"] == 1 and all(e["tensors"] == 2 for e in s["codecs"]), s


def test_perf_help_states_each_default_once(capsys):
    with pytest.raises(SystemExit):
        perf.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text and "(default: False)" not in text, text
    assert "(default: none and fp8_e4m3:g128)" in text and "(default: 5)" in text
    assert text.count("(default: none and fp8_e4m3:g128)") == 1
