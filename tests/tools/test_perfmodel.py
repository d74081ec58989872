"""The alpha-beta model's formulas, checked against hand computations."""
from dataclasses import replace

import pytest

from ccompress import perfmodel as pm


def system(ranks=4, gbit=1.0, alpha=0.0):
    return pm.System("t", ranks, pm.Link(pm.gbit(gbit), alpha, per_message=0.0),
                     slice_elems=1)


def test_transfer_bound_two_shot_matches_hand_count():
    # 4 ranks, 1 byte per element, kernels infinitely fast: the time is the bytes a rank
    # sends (2 (p-1)/p n) over the link, plus one slice's transfer.
    n = 1 << 20
    c = pm.CodecCost("x", 1.0, float("inf"), float("inf"))
    t = pm.collective_time(system(), n, 4, c, "two_shot")
    assert t == pytest.approx(2 * 3 / 4 * n / pm.gbit(1) + 1 / pm.gbit(1))


def test_kernel_bound_when_codec_is_slow():
    n = 1 << 20
    c = pm.CodecCost("slow", 1.0, 1e6, 1e6)
    t = pm.collective_time(system(gbit=1000), n, 4, c, "two_shot")
    kernels = n / 1e6 + n / 1e6 + n / 4 / 1e6 + n / 1e6
    assert t == pytest.approx(kernels, rel=1e-3)
    # the all-gather's last step is a plain decode, at its own rate when one is measured
    fast_out = replace(c, decode_out=4e6)
    t = pm.collective_time(system(gbit=1000), n, 4, fast_out, "two_shot")
    assert t == pytest.approx(n / 1e6 + n / 1e6 + n / 4 / 1e6 + n / 4e6, rel=1e-3)


def test_baseline_is_the_better_of_ring_and_tree():
    n = 1 << 20
    s = pm.System("t", 4, pm.Link(pm.gbit(1), 0.0), reduce_rate=float("inf"))
    assert pm.baseline_time(s, n, 4) == pytest.approx(2 * 3 / 4 * n * 4 / pm.gbit(1))
    slow = pm.System("t", 1024, pm.Link(pm.gbit(100), 1e-3), reduce_rate=float("inf"))
    tree = 2 * n * 4 / pm.gbit(100) + 2 * 10 * 1e-3
    assert pm.baseline_time(slow, n, 4) == pytest.approx(tree)


def test_compression_pays_on_slow_links_only():
    n = 16 << 20
    fp8 = pm.CodecCost("fp8", 1.03, 0.5e9, 1.3e9)
    slow, fast = system(gbit=1), system(gbit=400)
    assert pm.collective_time(slow, n, 4, fp8, "two_shot") < pm.baseline_time(slow, n, 4) / 3
    assert pm.collective_time(fast, n, 4, fp8, "two_shot") > pm.baseline_time(fast, n, 4)


def test_best_respects_the_error_budget():
    n = 1 << 20
    a = pm.CodecCost("a", 0.5, 1e12, 1e12)
    b = pm.CodecCost("b", 2.0, 1e12, 1e12)
    errors = {("a", "two_shot"): 0.1, ("b", "two_shot"): 0.001}
    t, codec, algo = pm.best(system(), n, 4, [a, b], errors, budget=0.01)
    assert (codec, algo) == ("b", "two_shot")
    _, codec, _ = pm.best(system(), n, 4, [a, b])
    assert codec == "a"
    with pytest.raises(ValueError):
        pm.best(system(), n, 4, [a], errors, budget=1e-6)


def test_choose_algo_is_the_argmin_of_the_model():
    fp8 = pm.CodecCost("fp8", 1.03, 0.5e9, 1.3e9)
    slow_latency = pm.System("t", 8, pm.Link(pm.gbit(100), 1e-3, per_message=0.0))
    for n in (1 << 8, 1 << 14, 1 << 20, 1 << 26):
        times = {a: pm.collective_time(slow_latency, n, 4, fp8, a) for a in pm.ALGOS}
        assert pm.choose_algo(slow_latency, n, 4, fp8) == min(times, key=times.get)
    # Latency-bound small messages want few rounds; on a slow link large ones want the
    # fewest bytes in the fewest rounds (two_shot: ring sends as much in more rounds).
    assert pm.choose_algo(slow_latency, 256, 4, fp8) == "one_shot"
    slow_link = pm.System("t", 8, pm.Link(pm.gbit(1), 1e-3, per_message=0.0))
    assert pm.choose_algo(slow_link, 1 << 26, 4, fp8) == "two_shot"


def test_algo_model_feeds_auto_on_every_rank():
    import numpy as np

    import ccompress as cc

    fp8 = cc.Codec.parse("fp8_e4m3:g128")
    # A latency-bound system makes one_shot the pick for small sizes (the built-in
    # heuristic would pick two_shot above 64 KiB); the model's pick must be what runs, on
    # every rank, and give exactly what an explicit call with that algo gives.
    cost = pm.CodecCost(fp8.name, fp8.wire_bytes(1 << 20) / (1 << 20), 1e9, 1e9)
    model = pm.AlgoModel(pm.System("t", 1, pm.Link(pm.gbit(100), 10e-3, per_message=0.0)),
                         (cost,))
    n = 1 << 15
    expect = model.choose(n, 4, fp8.name, 4)
    assert expect == "one_shot"
    assert cc.Communicator.inproc(1)[0]._model is None

    def body(comm):
        x = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
        y = comm.allreduce(x, codec=fp8, algo="auto")
        algo = comm.last_stats["algo"]
        z = comm.allreduce(x, codec=fp8, algo=expect)
        unknown = comm.allreduce(x, codec="bf16", algo="auto")  # no cost: built-in heuristic
        return y, z, algo, comm.last_stats["algo"], unknown

    res = cc.run_inproc(4, body, model=model)
    for y, z, algo, fallback, _ in res:
        assert algo == expect
        assert fallback == cc._core.choose_algo(n, "float32", cc.Codec.parse("bf16")._c, 4)
        np.testing.assert_array_equal(y, z)
        np.testing.assert_array_equal(y, res[0][0])
    with pytest.raises(cc.InvalidArgument, match="AlgoModel"):
        cc.Communicator.inproc(2, model="fast")


# The host transport's terms (CPU systems: MPI over TCP, shared memory inside a node), each
# on a case computed by hand.
HOST = pm.HostTransport(tcp_per_byte=1e-9, per_message=10e-6, shm_per_byte=0.5e-9,
                        node_per_byte=0.5e-9, frame=1.0)


def host_system(ranks=4, gbit=1e6, g=1, cores=2, host=HOST, intra_gbs=1e6):
    intra = pm.Link(intra_gbs * 1e9, 0.0, per_message=0.0) if g > 1 else None
    return pm.System("h", ranks, pm.Link(pm.gbit(gbit), 0.0, per_message=0.0), g, intra,
                     cores_per_rank=cores / ranks, reduce_rate=1e9, slice_elems=1 << 18,
                     host=host)


def test_host_transport_cpu_counts_bytes_messages_and_shared_memory():
    # 1 MB over TCP at 1 ns, 2 MB through shared memory at 0.5 ns, 5 messages at 10 us
    assert HOST.cpu(1e6, 2e6, 5) == pytest.approx(1e-3 + 1e-3 + 50e-6)
    # a rank with half a core needs twice that long for it
    assert host_system().transport_time(1e6, 2e6, 5) == pytest.approx(2 * 2.05e-3)
    assert system().transport_time(1e6, 2e6, 5) == 0.0  # no host transport: no term


def test_a_shaper_adds_its_cpu_per_tcp_byte_only():
    # 0.4 ns more per TCP byte through a rate limit; shared memory and messages unchanged
    shaped = replace(HOST, shaper_per_byte=0.4e-9)
    assert shaped.cpu(1e6, 2e6, 5) == pytest.approx(1.4e-3 + 1e-3 + 50e-6)
    # model_report: the unlimited links of a run carry no shaper, the rate-limited ones do
    mr = _model_report()
    costs = {"none": pm.CodecCost("none", 4.0, 2e9, 1.5e9)}
    assert mr.base_system(costs, 4, mr.UNLIMITED_GBIT, 1, 4.0, shaped).host.shaper_per_byte == 0
    assert mr.base_system(costs, 4, 1.0, 1, 4.0, shaped).host.shaper_per_byte == 0.4e-9


def test_shaper_cpu_is_the_shaped_minus_the_unshaped_transfer(tmp_path):
    # perf/bench/tcp_cpu.py's json: (sender, receiver) CPU s per transfer of `bytes`, per message
    # size; medians of sender + receiver at 256 KiB: 0.3 s and 0.1 s for 1e9 bytes
    import json

    mr = _model_report()
    for name, runs in (("shaped", [[0.2, 0.1], [0.25, 0.1], [0.1, 0.1]]),
                       ("free", [[0.05, 0.05], [0.06, 0.06], [0.01, 0.01]])):
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {"bytes": 10**9, "raw_cpu_s": {str(1 << 18): runs, str(1 << 20): [[9.0, 9.0]]}}))
    got = mr.shaper_cpu(str(tmp_path / "shaped.json"), str(tmp_path / "free.json"))
    assert got == pytest.approx(0.2e-9)


def test_framing_takes_the_headers_off_the_link():
    # TCP/IP over Ethernet: 1448 payload bytes in a 1514-byte frame; a transfer-bound
    # two_shot (free kernels and CPU) moves 2 (p-1)/p n payload bytes at 1448/1514 of the rate.
    free = pm.HostTransport(0.0, 0.0, 0.0)
    s = host_system(gbit=1, host=free)
    n = 1 << 20
    c = pm.CodecCost("x", 1.0, float("inf"), float("inf"))
    bw = pm.gbit(1) * 1448 / 1514
    assert s.link_bandwidth() == pytest.approx(bw)
    assert pm.collective_time(s, n, 4, c, "two_shot") == pytest.approx(
        2 * 3 / 4 * n / bw + (1 << 18) / bw)


def test_cpu_bound_rank_pays_codec_and_transport_over_its_core_share():
    # 4 ranks on 2 cores (half a core each), a link too fast to matter, 1 byte per element,
    # encode and decode at 1e9 elements/s on a whole core. n = 2^20: each chunk is 2^18
    # elements, one MPI slice, so a rank sends 2 (p-1) = 6 messages of 2^18 bytes.
    n, k = 1 << 20, 1 << 18
    c = pm.CodecCost("x", 1.0, 1e9, 1e9)
    kernels = (n + n + k + n) / 1e9                  # encode, decode, re-encode, decode
    transport = 6 * k * 1e-9 + 6 * 10e-6             # 6 * 2^18 bytes over TCP, 6 messages
    fill = k / 0.5e9                                 # one slice's encode at half a core
    t = pm.collective_time(host_system(), n, 4, c, "two_shot")
    assert t == pytest.approx((kernels + transport) / 0.5 + fill, rel=1e-6)


def test_mpi_allreduce_on_a_host_adds_its_cpu_to_the_wire():
    # MPI_Allreduce's steps block: ring bytes on the wire (2 (p-1)/p n 4 bytes at 1 Gbit/s),
    # then its reduction ((p-1)/p n at 1e9/s on half a core) and its TCP CPU (the same
    # bytes at 1 ns, 2 log2 p = 4 messages) on half a core, one after the other.
    n = 1 << 20
    sent = 2 * 3 / 4 * n * 4
    expect = sent / pm.gbit(1) + 3 / 4 * n / 0.5e9 + (sent * 1e-9 + 4 * 10e-6) / 0.5
    assert pm.baseline_time(host_system(gbit=1), n, 4) == pytest.approx(expect)


def test_mpi_allreduce_hides_its_own_share_of_the_shorter_of_wire_and_cpu():
    # the same call with baseline_overlap 0.4: the wire is the longer at 1 Gbit/s, so 60% of
    # the reduction and TCP CPU add to it; ccompress's overlap does not apply to MPI
    n = 1 << 20
    sent = 2 * 3 / 4 * n * 4
    wire = sent / pm.gbit(1)
    cpu = 3 / 4 * n / 0.5e9 + (sent * 1e-9 + 4 * 10e-6) / 0.5
    assert wire > cpu
    s = host_system(gbit=1)
    s = replace(s, host=replace(s.host, baseline_overlap=0.4, overlap=0.9))
    assert pm.baseline_time(s, n, 4) == pytest.approx(wire + 0.6 * cpu)


def test_mpi_allreduce_on_two_levels_is_node_aware():
    # 2 nodes x 2 ranks: a reduce into one rank per node and the broadcast back (n 4 bytes
    # into the leader and out again at 0.5 ns a byte of node-level CPU, half a core) plus
    # the reduce's sum (n at 1e9/s, half a core), and the 2 leaders' all-reduce over TCP
    # (n 4 bytes each way at 1 Gbit/s, then its sum and TCP CPU).
    n = 1 << 20
    b = n * 4
    inside = 2 * b * 0.5e-9 / 0.5 + n / 0.5e9
    leaders = b / pm.gbit(1) + n / 2 / 0.5e9 + (b * 1e-9 + 2 * 10e-6) / 0.5
    assert pm.baseline_time(host_system(gbit=1, g=2), n, 4) == pytest.approx(inside + leaders)


def test_hier_cpu_bound_counts_tcp_between_and_shared_memory_inside():
    # 2 nodes x 2 ranks, links too fast to matter, 1 byte per element between nodes, the
    # exact level inside (4 bytes, copies at 2e9/s). Per rank: 2 (nodes-1) n/p bytes over
    # TCP, (g-1)/g n (4 + 1) bytes through shared memory, 2 (nodes-1) + 2 nodes (g-1) = 6
    # messages per slice of a chunk (one slice here).
    n, g, p = 1 << 20, 2, 4
    c = pm.CodecCost("x", 1.0, 1e9, 1e9)
    exact = pm.CodecCost("none", 4.0, 2e9, 2e9)
    # the exact level: the (g-1)/g of the tensor the other rank collects encoded, and the
    # collector's g terms of n/g summed; the codec: n/g + n/p encoded, n/g + n decoded
    kernels = (g - 1) / g * n / 2e9 + n / 2e9 + (n / g + n / p) / 1e9 + (n / g + n) / 1e9
    transport = 2 * n / p * 1e-9 + n / 2 * 5 * 0.5e-9 + 6 * 10e-6
    fill = (1 << 18) * (1 / 1e9 + 1 / 0.5e9)         # one slice's encodes, half a core
    t = pm.hier_time(host_system(g=g), n, 4, c, intra=exact)
    assert t == pytest.approx((kernels + transport) / 0.5 + fill, rel=1e-3)


def test_gpu_systems_have_no_host_transport_and_emulated_ones_mpis_slice():
    assert all(s.host is None for s in pm.SYSTEMS.values())
    e = pm.emulated_system(4, 1.0, 2, ranks_per_node=2)
    assert e.host is pm.EMULATED_HOST and e.slice_elems == pm.MPI_SLICE_ELEMS
    assert e.cores_per_rank == 0.5 and e.intra is not None
    # the model's MPI slice is the transport's (cuda/src/transport/mpi_transport.h)
    import pathlib
    import re

    header = pathlib.Path(__file__).parents[2] / "cuda/src/transport/mpi_transport.h"
    shift = re.search(r"kSliceElems = int64_t\(1\) << (\d+);", header.read_text())
    assert shift and pm.MPI_SLICE_ELEMS == 1 << int(shift.group(1))


def _model_report():
    from perf.model import model_report
    return model_report


def test_calibration_recovers_the_cpu_per_tcp_byte_and_validation_reports_the_error(
        tmp_path, capsys):
    import json

    mr = _model_report()
    costs = {"none": pm.CodecCost("none", 4.0, 2e9, 1.5e9),
             "fp8_e4m3:g128": pm.CodecCost("fp8_e4m3:g128", 1.03, 1.4e9, 1.2e9)}
    truth = pm.HostTransport(1.7e-9, 30e-6, 0.7e-9, 0.6e-9)
    n = 16 << 20

    def unlimited(codec):
        s = mr.base_system(costs, 4, mr.UNLIMITED_GBIT, 1, 4.0, truth)
        return mr.model_row(s, codec, "two_shot", n, 4, costs)

    spec = ",".join(f"{c}={unlimited(c) * 1e3!r}" for c in ("MPI_Allreduce", "fp8_e4m3:g128"))
    got = mr.calibrate(mr.spec_rows(spec), costs, truth.shm_per_byte, truth.per_message,
                       truth.node_per_byte)
    assert got.tcp_per_byte == pytest.approx(truth.tcp_per_byte, rel=1e-9)
    # rows on nodes (2 x 2, hier) fit alongside the flat ones
    s2 = mr.base_system(costs, 4, mr.UNLIMITED_GBIT, 2, 4.0, truth)
    hier = {"codec": "fp8_e4m3:g128", "algo": "hier", "count": n, "size": 4 * n,
            "ranks": 4, "ranks_per_node": 2,
            "time_us": mr.model_row(s2, "fp8_e4m3:g128", "hier", n, 4, costs) * 1e6}
    got = mr.calibrate(mr.spec_rows(spec) + [hier], costs, truth.shm_per_byte,
                       truth.per_message, truth.node_per_byte)
    assert got.tcp_per_byte == pytest.approx(truth.tcp_per_byte, rel=1e-9)
    # a two-level MPI_Allreduce row fits the node-level phases' CPU per byte too, from a
    # wrong starting value; without one the given value stays
    node = dict(hier, codec="MPI_Allreduce", algo="-",
                time_us=mr.model_row(s2, "MPI_Allreduce", "-", n, 4, costs) * 1e6)
    got = mr.calibrate(mr.spec_rows(spec) + [hier, node], costs, truth.shm_per_byte,
                       truth.per_message, 5 * truth.node_per_byte)
    assert got.tcp_per_byte == pytest.approx(truth.tcp_per_byte, rel=1e-6)
    assert got.node_per_byte == pytest.approx(truth.node_per_byte, rel=1e-6)
    assert mr.calibrate(mr.spec_rows(spec), costs, truth.shm_per_byte, truth.per_message,
                        5 * truth.node_per_byte).node_per_byte \
        == pytest.approx(5 * truth.node_per_byte, rel=1e-12)
    # a run measured 10% slower than the model: validation says -9.1% (model under)
    s1 = mr.base_system(costs, 4, 1.0, 1, 4.0, truth)
    t = mr.model_row(s1, "fp8_e4m3:g128", "two_shot", n, 4, costs)
    run = [{"rate_gbit": 1.0, "ranks": 4, "ranks_per_node": 1, "burst_bytes": 10**6,
            "rows": [{"count": n, "size": 4 * n, "codec": "fp8_e4m3:g128", "algo": "two_shot",
                      "time_us": 1.1 * t * 1e6, "wire_bytes": 26 * 10**6, "in_burst": False}]}]
    # the run's unlimited links (emulated_net.py --overlap): calibration data, not validated
    run.insert(0, {"rate_gbit": None, "ranks": 4, "ranks_per_node": 1,
                   "rows": [{"codec": "MPI_Allreduce", "time_us": 250e3},
                            {"codec": "fp8_e4m3:g128", "time_us": 180.04e3}]})
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    assert [(r["codec"], r["time_us"], r["ranks_per_node"]) for r in mr.unlimited_rows(str(path))] \
        == [("MPI_Allreduce", 250e3, 1), ("fp8_e4m3:g128", 180.04e3, 1)]
    rows = mr.validate([str(path)], costs, 4.0, truth)
    assert [round(r["error"], 4) for r in rows] == [round(1 / 1.1 - 1, 4)]
    assert "outside the burst: median |error| 9.1%" in capsys.readouterr().out


def test_speedup_error_compares_the_model_speedup_within_one_run():
    # a run 20% slower than the model on every row (a slow host that day) has no speedup
    # error; a row the model has 10% too fast against its baseline has +10%
    mr = _model_report()
    rows = [{"file": "a", "gbit": 10.0, "codec": "MPI_Allreduce", "measured_s": 0.36, "model_s": 0.3},
            {"file": "a", "gbit": 10.0, "codec": "fp8", "measured_s": 0.12, "model_s": 0.1},
            {"file": "a", "gbit": 10.0, "codec": "hint8", "measured_s": 0.132, "model_s": 0.1},
            {"file": "b", "gbit": 10.0, "codec": "fp8", "measured_s": 0.1, "model_s": 0.1}]
    mr.speedup_errors(rows)
    assert "speedup_error" not in rows[0] and "speedup_error" not in rows[3]
    assert rows[1]["speedup_error"] == pytest.approx(0.0, abs=1e-12)
    assert rows[2]["speedup_error"] == pytest.approx(0.1)


def test_overlap_hides_a_share_of_the_shorter_of_wire_and_cpu():
    n = 16 << 20
    c = pm.CodecCost("x", 1.0, 1e9, 1e9)
    full = replace(HOST, overlap=1.0)
    s1 = pm.emulated_system(4, 1.0, 4)  # 4 ranks on 4 cores
    s07 = replace(s1, host=replace(full, overlap=0.7))
    t1 = pm.collective_time(replace(s1, host=full), n, 4, c, "two_shot")
    t07 = pm.collective_time(s07, n, 4, c, "two_shot")
    # 1 Gbit/s, 1 byte per element: the wire (2 (p-1)/p n bytes) is the longer; 30% of the CPU
    # time (kernels and transport, a core per rank) adds to it
    kernels = n / 1e9 + n / 1e9 + n / 4 / 1e9 + n / 1e9
    cpu = kernels + HOST.cpu(2 * 3 / 4 * n, 0, 2 * 3 * pm._slices(n / 4, s1.slice_elems))
    assert 2 * 3 / 4 * n / s1.link_bandwidth() > cpu
    assert t07 - t1 == pytest.approx(0.3 * cpu, rel=1e-6)
    # systems without a host transport (GPUs) hide all of it
    gpu = pm.System("g", 4, pm.Link(pm.gbit(1.0), 0.0))
    assert gpu.overlapped(2.0, 1.0) == 2.0
    assert s07.overlapped(2.0, 1.0) == pytest.approx(2.3)


def test_fit_shaper_recovers_the_shapers_cpu_and_the_overlap_from_rate_limited_rows(
        tmp_path, capsys):
    import json

    mr = _model_report()
    costs = {"none": pm.CodecCost("none", 4.0, 2e9, 1.5e9),
             "fp8_e4m3:g128": pm.CodecCost("fp8_e4m3:g128", 1.03, 1.4e9, 1.2e9)}
    truth = pm.HostTransport(0.9e-9, 30e-6, 0.4e-9, 0.1e-9, shaper_per_byte=0.35e-9,
                             overlap=0.7, baseline_overlap=0.4)
    n = 16 << 20
    runs = []
    for gbit in (1.0, 10.0):  # CPU-bound at 10 Gbit/s: there the shaper's CPU shows
        s = mr.base_system(costs, 4, gbit, 1, 4.0, truth)
        rows = [{"count": n, "size": 4 * n, "codec": c, "algo": "two_shot", "in_burst": False,
                 "wire_bytes": 26 * 10**6,
                 "time_us": mr.model_row(s, c, "two_shot", n, 4, costs) * 1e6}
                for c in ("MPI_Allreduce", "fp8_e4m3:g128")]
        runs.append({"rate_gbit": gbit, "ranks": 4, "ranks_per_node": 1,
                     "burst_bytes": 10**5, "rows": rows})
    path = tmp_path / "run.json"
    path.write_text(json.dumps(runs))
    got = mr.fit_shaper([str(path)], costs, replace(truth, shaper_per_byte=0.0, overlap=1.0,
                                                    baseline_overlap=0.0), 4.0)
    assert got.shaper_per_byte == pytest.approx(truth.shaper_per_byte, abs=0.005e-9)
    assert got.overlap == pytest.approx(truth.overlap, abs=0.005)
    assert got.baseline_overlap == pytest.approx(truth.baseline_overlap, abs=0.005)
    out = capsys.readouterr().out
    assert "shaper and overlap fitted on 4 rate-limited rows" in out
    assert "70% of the shorter of wire and CPU time hidden (40% for MPI_Allreduce)" in out


def test_rounds_of_codec_throughput_give_each_rates_median(tmp_path):
    import json

    mr = _model_report()
    paths = []
    for i, (enc, dec, out) in enumerate([(1e9, 2e9, 3e9), (3e9, 1e9, 2e9), (2e9, 4e9, None)]):
        row = {"codec": "x", "bits_per_element": 8.0, "encode_elems_per_s": enc,
               "decode_acc_elems_per_s": dec}
        if out:
            row["decode_elems_per_s"] = out
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps([row]))
    c = mr.load_costs([str(p) for p in paths])["x"]
    assert (c.encode, c.decode, c.decode_out) == (2e9, 2e9, 2.5e9)
    assert pm.load_codec_costs(str(paths[2]))["x"].out_rate == 4e9  # no plain decode: decode's


def test_measure_codec_cost_times_decode_accumulate_and_the_plain_decode_apart():
    c = pm.measure_codec_cost("fp8_e4m3:g128", n=1 << 16, reps=1)
    assert c.wire_per_element == pytest.approx(1.03125)
    assert min(c.encode, c.decode, c.decode_out) > 0
    assert c.out_rate == c.decode_out
