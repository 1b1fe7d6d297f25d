"""CUDA traces read without a GPU: synthetic device traces, each figure worked out by hand from its events.

No GPU is lent to this project, so the kit's CUDA paths are checked here on traces written by hand in the
shape torch 2.x's profiler writes (categories ``cpu_op``, ``user_annotation``, ``kernel``, ``gpu_memcpy``,
``gpu_memset``, ``cuda_runtime``, ``cuda_driver``; a launch linked to its device work by ``correlation``, to
its operator by ``External id``). Most are the synthetic traces of torch-tb-profiler's own unit tests
(TensorBoard's profiler plugin, installed beside the kit), brought to those categories, with a
``ProfilerStep#`` where the plugin's had none.

Each figure is asserted against the number worked out from the events (the sums are written out), and,
where the plugin defines the same quantity the same way, against what the installed plugin's parser
computes from the same events (``plugin``: its categories back, ``cuda_runtime`` and ``cuda_driver`` as its
``Runtime``). Where the two define a quantity differently the test says which definition the kit keeps:

* the plugin's Overview splits one timeline that holds the device's roles (kernel, copy, memset) and the
  host's (runtime calls, DataLoader, operators) in that order, so a host part is what the device left
  over; the kit's host parts split the host's time alone, the device's busy time beside them;
* the plugin stretches a step on the device to the end of the work it launched; the kit's step is the host's,
  and the work it launched counts whole (``measuring.device``), so device busy may exceed the step;
* the plugin counts a ``nccl:`` range on the host as communication; the kit counts NCCL's kernels, as its
  documentation says (the host's range only queues them).
"""

from __future__ import annotations

import json
import logging

import pytest

from proflab.measuring import breakdown, device, diagnosis, evidence, operators

PID, DEVICE = 13721, 0


def x(name, cat, ts, dur, tid=456, pid=PID, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def op(name, ts, dur, ext, tid=456, cat="cpu_op"):
    return x(name, cat, ts, dur, tid, **{"External id": ext})


def launch(name, ts, dur, corr, ext=None, tid=456, cat="cuda_runtime"):
    args = {"correlation": corr, "cbid": 211}
    if ext is not None:
        args["External id"] = ext
    return x(name, cat, ts, dur, tid, **args)


def kernel(name, ts, dur, corr, ext=None, stream=7, dev=DEVICE, cat="kernel"):
    args = {"device": dev, "stream": stream, "correlation": corr}
    if ext is not None:
        args["External id"] = ext
    return x(name, cat, ts, dur, f"stream {stream}", dev, **args)


def step(n, ts, dur, tid=456):
    return x(f"ProfilerStep#{n}", "user_annotation", ts, dur, tid)


def read(events, name="cuda.pt.trace.json") -> evidence.Trace:
    return evidence.from_data(name, {"schemaVersion": 1, "traceEvents": events})


# --- the peer: torch-tb-profiler's parser, on the same events in its categories --------------------------

PLUGIN_CATEGORY = {"cuda_runtime": "Runtime", "cuda_driver": "Runtime"}


def plugin(events):
    """The installed torch-tb-profiler's reading of ``events``: its ``RunProfileData``, processed."""
    data = pytest.importorskip("torch_tb_profiler.profiler.data")
    logging.getLogger("torch.tb_profiler").setLevel(logging.ERROR)
    theirs = []
    for e in json.loads(json.dumps(events)):
        if e["cat"] == "user_annotation" and not e["name"].startswith("ProfilerStep#"):
            e["cat"] = "cpu_op"  # the plugin drops user_annotation ranges; the kit re-files them so (``traces``)
        e["cat"] = PLUGIN_CATEGORY.get(e["cat"], e["cat"])
        if "External id" in e["args"] and e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["args"]["external id"] = e["args"]["External id"]
        theirs.append(e)
    return data.RunProfileData.from_json("worker0", 0, {"schemaVersion": 1, "traceEvents": theirs})


def plugin_role(profile, role: str) -> float:
    """One role of the plugin's Overview, averaged over its steps (µs)."""
    from torch_tb_profiler.profiler.event_parser import ProfileRole

    return profile.avg_costs.costs[getattr(ProfileRole, role)]


def plugin_device(profile) -> float:
    """The plugin's device time per step: its kernel, copy and memset roles (merged, in that order)."""
    return sum(plugin_role(profile, r) for r in ("Kernel", "Memcpy", "Memset"))


def plugin_ops(profile) -> dict:
    return {o.name: o for o in profile.op_list_groupby_name}


def rows(trace, **options) -> dict[str, operators.Row]:
    return {r.name: r for r in operators.table(trace, **options)}


# --- 1. device work counts inside the profiled steps ------------------------------------------------------

def kernels_outside_the_step():
    """The plugin's test_gpu_utilization_kernel_out_of_step: one step (100–200 µs); two kernels launched
    outside it run outside it (60–80 and 240–265 µs)."""
    return [
        op("aten::mat_mul", 10, 10, 1),
        op("aten::mm", 120, 70, 3),
        op("aten::mm", 220, 20, 4),
        step(2, 100, 100),
        kernel("void cunn_ClassNLLCriterion_updateGradInput_kernel<float>", 60, 20, 334, 1),
        launch("cudaLaunchKernel", 15, 5, 334, 1),
        kernel("void cunn_ClassNLLCriterion_updateGradInput_kernel<float>", 240, 25, 337, 4),
        launch("cudaLaunchKernel", 230, 10, 337, 4),
    ]


def test_kernels_launched_and_run_outside_the_step_leave_the_device_idle():
    trace = read(kernels_outside_the_step())
    b = breakdown.of(trace)
    assert b.step_ms * 1000 == 100
    assert b.device_busy_ms == 0  # was 45 µs: 20 + 25 of kernels no step launched
    assert b.host_ms["CPU ops"] * 1000 == 70  # aten::mm 120–190; the other two are outside the step
    assert rows(trace)["aten::mm"].self_device_us == 0  # the aten::mm inside the step launched nothing
    found = diagnosis.overview_findings(trace, b)
    assert diagnosis.DEVICE_IDLE_NONE in [what for what, _ in found]
    assert not any("busy only" in what for what, _ in found)
    # the plugin agrees: no device time in the step, and a GPU utilization of 0
    theirs = plugin(kernels_outside_the_step())
    assert plugin_device(theirs) == 0
    assert theirs.gpu_metrics_parser.gpu_utilization[DEVICE] == 0


def test_the_overview_of_the_kernels_outside_the_step_says_the_device_is_idle():
    pytest.importorskip("tensorboard")
    from proflab.viewing import dashboard

    shown = dashboard.overview(read(kernels_outside_the_step()))
    assert shown["on_cuda"] and shown["device_busy_ms"] == 0
    assert any("idle throughout the profiled steps" in f["what"] for f in shown["findings"])


def all_categories():
    """The plugin's test_all_categories: a DataLoader wait, an operator on another thread launching a copy,
    a memset and a kernel, inside one step (50–450 µs)."""
    return [
        op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 100, 180, 2, tid=123,
           cat="user_annotation"),
        op("aten::to", 200, 60, 3, tid=123),
        op("aten::nll_loss_backward", 340, 70, 4),
        step(1, 50, 400, tid=123),
        kernel("Memcpy HtoD (Pageable -> Device)", 405, 10, 334, 4, cat="gpu_memcpy"),
        launch("cudaMemcpyAsync", 360, 20, 334, 4),
        kernel("Memset (Device)", 420, 5, 40344, 4, cat="gpu_memset"),
        launch("cudaMemsetAsync", 390, 10, 40344, 4),
        kernel("void cunn_ClassNLLCriterion_updateGradInput_kernel<float>", 430, 15, 40348, 4),
        launch("cudaLaunchKernel", 405, 5, 40348, 4),
    ]


def test_copies_memsets_and_kernels_a_step_launched():
    trace = read(all_categories())
    b = breakdown.of(trace)
    assert b.device_busy_ms * 1000 == 10 + 5 + 15  # copy 405–415, memset 420–425, kernel 430–445
    assert b.host_ms["DataLoader wait"] * 1000 == 180
    assert b.host_ms["CPU ops"] * 1000 == 70  # aten::nll_loss_backward (aten::to is inside the DataLoader's)
    assert b.host_ms["other"] * 1000 == 400 - 180 - 70
    mine = rows(trace, loading_apart=False)
    nll = mine["aten::nll_loss_backward"]
    assert (nll.calls, nll.cpu_total_us, nll.self_cpu_us, nll.self_device_us) == (1, 70, 70 - 20 - 10 - 5, 30)
    theirs = plugin(all_categories())
    assert plugin_device(theirs) * 1 == b.device_busy_ms * 1000
    assert plugin_role(theirs, "DataLoader") == b.host_ms["DataLoader wait"] * 1000
    peer = plugin_ops(theirs)["aten::nll_loss_backward"]
    assert (peer.calls, peer.host_duration, peer.self_host_duration, peer.self_device_duration) == \
        (nll.calls, nll.cpu_total_us, nll.self_cpu_us, nll.self_device_us)
    # differs by definition: the plugin's CPU operators are what its device and runtime roles left over of
    # the step (35 µs); the kit's are the host's own time in operators, runtime calls included (70 µs)
    assert plugin_role(theirs, "CpuOp") == 35


def overlapping_steps():
    """The plugin's test_multiple_profilersteps_with_overlap: a kernel the warm-up launched (no launch in the
    trace) still runs as step 1 begins; step 1's copy runs into step 2; step 2's kernel after it."""
    return [
        step(1, 100, 200, tid=123),
        op("aten::to", 200, 60, 2, tid=123),
        step(2, 350, 150, tid=123),
        op("aten::mm", 360, 50, 4, tid=123),
        kernel("void cunn_ClassNLLCriterion_updateGradInput_kernel<float>", 150, 90, 123, 0),
        kernel("Memcpy HtoD (Pageable -> Device)", 280, 100, 334, 2, cat="gpu_memcpy"),
        launch("cudaMemcpyAsync", 250, 5, 334, 2, tid=123),
        kernel("void cunn_ClassNLLCriterion_updateGradInput_kernel<float>", 410, 200, 40348, 4),
        launch("cudaLaunchKernel", 400, 5, 40348, 4, tid=123),
    ]


def test_work_belongs_to_the_step_that_launched_it_counted_whole():
    trace = read(overlapping_steps())
    b = breakdown.of(trace)
    # step 1: its copy (280–380, whole, past its end at 300); step 2: its kernel (410–610, past 500); the
    # warm-up's kernel (150–240, no launch in the trace) is no step's
    assert b.device_busy_ms * 1000 == (100 + 200) / 2
    assert [(e.ts, i) for e, i in device.step_work(trace)] == [(280, 0), (410, 1)]
    assert b.step_ms * 1000 == (200 + 150) / 2
    assert rows(trace)["aten::mm"].self_device_us == 200
    # the plugin counts the same work in the same steps (it stretches each step to hold it: its Total
    # differs, the kit's step is the host's)
    theirs = plugin(overlapping_steps())
    assert [s.costs[0] + s.costs[1] + s.costs[2] for s in theirs.steps_costs] == [100, 200]
    assert plugin_device(theirs) == b.device_busy_ms * 1000


def overlapping_kernels():
    """Two operators launching onto two streams: their kernels overlap on the device."""
    return [
        step(1, 0, 100),
        op("aten::mm", 10, 10, 1),
        launch("cudaLaunchKernel", 12, 4, 11, 1),
        op("aten::add", 20, 10, 2),
        launch("cudaLaunchKernel", 22, 4, 12, 2),
        kernel("gemm", 30, 40, 11, 1, stream=7),
        kernel("add_kernel", 40, 50, 12, 2, stream=8),
    ]


def test_overlapping_kernels_count_once_in_busy_and_each_to_its_operator():
    trace = read(overlapping_kernels())
    assert breakdown.of(trace).device_busy_ms * 1000 == 90 - 30  # 30–70 and 40–90 merged
    mine = rows(trace)
    assert (mine["aten::mm"].self_device_us, mine["aten::add"].self_device_us) == (40, 50)
    theirs = plugin(overlapping_kernels())
    assert plugin_device(theirs) == 60
    assert {n: o.self_device_duration for n, o in plugin_ops(theirs).items()} == {"aten::mm": 40, "aten::add": 50}


def two_devices():
    """The plugin's test_runtime_launch_multipe_kernels: one launch puts a kernel on each of two GPUs."""
    return [
        step(1, 0, 400),
        op("Broadcast", 100, 300, 2),
        launch("cudaLaunchCooperativeKernelMultiDevice", 130, 20, 335, 2),
        kernel("ncclBroadcastRingLLKernel_copy_i8(ncclColl)", 160, 120318, 335, 2, stream=13, dev=0),
        kernel("ncclBroadcastRingLLKernel_copy_i8(ncclColl)", 170, 132800, 335, 2, stream=22, dev=1),
    ]


def test_two_devices_busy_is_the_time_either_works():
    trace = read(two_devices())
    assert breakdown.of(trace).device_busy_ms * 1000 == (170 + 132800) - 160  # either device working
    assert rows(trace)["Broadcast"].self_device_us == 120318 + 132800  # each device's time, summed
    theirs = plugin(two_devices())
    assert plugin_ops(theirs)["Broadcast"].device_duration == 120318 + 132800
    assert plugin_role(theirs, "Kernel") == (170 + 132800) - 160


# --- 2. every launch links its work to its operator: runtime, driver, CUDA graphs -------------------------

def driver_launches():
    """torch.compile's step: an operator launches one kernel through the runtime and one through the driver
    (Triton's cuLaunchKernel), and a compiled region's driver call runs inside no operator, directly in the
    step (recorded here without the External id torch gives it)."""
    return [
        step(1, 0, 200),
        op("aten::mm", 10, 50, 1),
        launch("cudaLaunchKernel", 15, 5, 10, 1),
        launch("cuLaunchKernel", 30, 5, 11, 1, cat="cuda_driver"),
        launch("cuLaunchKernel", 100, 20, 12, cat="cuda_driver"),
        kernel("gemm", 100, 15, 10, 1),
        kernel("triton_poi_fused_add_0", 120, 15, 11),
        kernel("triton_poi_fused_mul_1", 140, 10, 12),
    ]


def test_a_driver_launch_gives_its_operator_its_device_time():
    trace = read(driver_launches())
    mine = rows(trace)
    assert mine["aten::mm"].self_device_us == 15 + 15  # was 15: the driver's kernel was lost
    assert mine["aten::mm"].self_cpu_us == 50 - 5 - 5  # both launches are its children
    # a launch inside no operator is the step's, as torch links it (its External id is the step's range)
    assert mine["ProfilerStep*"].self_device_us == 10
    assert mine["cuLaunchKernel"].calls == 2
    b = breakdown.of(trace)
    assert b.device_busy_ms * 1000 == 15 + 15 + 10
    assert b.host_ms["CPU ops"] * 1000 == 50 + 20  # the driver call outside aten::mm is launching, not Python
    assert b.host_ms["other"] * 1000 == 200 - 70
    # the plugin, reading a driver call as it reads a runtime call, links the same kernels
    theirs = plugin(driver_launches())
    assert plugin_ops(theirs)["aten::mm"].self_device_duration == 30
    assert plugin_device(theirs) == 40


def graph_launch():
    """A CUDA graph replayed: one cudaGraphLaunch, three kernels under its correlation."""
    return [
        step(1, 0, 100),
        op("aten::_graph_replay", 10, 20, 7, cat="user_annotation"),
        launch("cudaGraphLaunch", 12, 10, 70, 7),
        kernel("k0", 30, 10, 70, 7),
        kernel("k1", 40, 10, 70, 7),
        kernel("k2", 45, 20, 70, 7, stream=8),
    ]


def test_a_cuda_graph_launch_gives_its_operator_every_kernel_of_the_graph():
    trace = read(graph_launch())
    assert rows(trace)["aten::_graph_replay"].self_device_us == 10 + 10 + 20
    assert breakdown.of(trace).device_busy_ms * 1000 == 65 - 30
    theirs = plugin(graph_launch())
    assert plugin_ops(theirs)["aten::_graph_replay"].self_device_duration == 40
    assert plugin_device(theirs) == 35


def test_a_launch_without_an_external_id_goes_to_the_operator_around_it():
    events = [step(1, 0, 100), op("aten::add", 10, 30, 3), launch("cudaLaunchKernel", 15, 5, 30),
              launch("cuLaunchKernel", 25, 5, 31, cat="cuda_driver"),
              kernel("add_kernel", 50, 10, 30), kernel("triton_add", 60, 5, 31)]
    assert rows(read(events))["aten::add"].self_device_us == 10 + 5


# --- 3. nested operators of one name: as key_averages counts them -----------------------------------------

def nested_same_name():
    """The plugin's test_remove_dup_nodes: three nested aten::mm (an operator dispatching to itself), the
    innermost launching a kernel."""
    return [
        step(1, 0, 300),
        op("aten::mm", 100, 100, 2),
        op("aten::mm", 110, 80, 3),
        op("aten::mm", 120, 60, 4),
        launch("cudaLaunchKernel", 130, 20, 335, 4),
        kernel("void gemmSN_TN_kernel_64addr", 220, 8, 335, 4),
    ]


def test_nested_operators_of_one_name_are_one_call_as_key_averages_counts_them():
    mm = rows(read(nested_same_name()))["aten::mm"]
    # was 3 calls and 100 + 80 + 60 = 240 µs for 100 µs of wall time
    assert (mm.calls, mm.cpu_total_us, mm.self_cpu_us, mm.self_device_us) == (1, 100, 100 - 20, 8)
    peer = plugin_ops(plugin(nested_same_name()))["aten::mm"]
    assert (peer.calls, peer.host_duration, peer.self_host_duration, peer.self_device_duration) == (1, 100, 80, 8)


def test_two_children_of_one_name_stay_two_calls_as_torch_keeps_them():
    events = [step(1, 0, 300), op("two", 10, 100, 1), op("two", 20, 30, 2), op("two", 60, 40, 3)]
    two = rows(read(events))["two"]
    assert (two.calls, two.cpu_total_us, two.self_cpu_us) == (3, 100 + 30 + 40, 100 - 30 - 40 + 30 + 40)


def test_the_table_matches_key_averages_on_a_real_profile_of_nested_ranges(tmp_path):
    """torch's own key_averages, on this machine's CPU: a range nested in itself as an only child is one
    call; two children of one name under it are calls of their own; a name nested under another name is."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    def spin(seconds):
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            pass

    path = tmp_path / "nested.pt.trace.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(2):
            with record_function("same"):
                spin(0.001)
                with record_function("same"):
                    with record_function("same"):
                        torch.ones(4).sum()
            with record_function("two"):
                with record_function("two"):
                    spin(0.001)
                with record_function("two"):
                    spin(0.001)
            with record_function("a"), record_function("b"), record_function("a"):
                spin(0.001)
            prof.step()
    theirs = {e.key: e for e in prof.key_averages()}
    mine = rows(evidence.load(path), loading_apart=False)
    for name in ("same", "two", "a", "b", "aten::sum", "aten::ones"):
        assert mine[name].calls == theirs[name].count, name
        assert mine[name].cpu_total_us == pytest.approx(theirs[name].cpu_time_total, abs=2), name
        assert mine[name].self_cpu_us == pytest.approx(theirs[name].self_cpu_time_total, abs=2), name
    assert (mine["same"].calls, mine["two"].calls, mine["a"].calls) == (1, 3, 2)


# --- 4. data loading and communication, each defined once -------------------------------------------------

def datapipe():
    """A step that iterates a DataPipe (torchdata) before its forward pass."""
    return [
        step(1, 0, 100),
        op("enumerate(DataPipe)#ShufflerIterDataPipe", 10, 30, 1, cat="user_annotation"),
        op("enumerate(DataPipe)#MapperIterDataPipe", 15, 20, 2, cat="user_annotation"),
        op("aten::stack", 20, 10, 3),
        op("aten::mm", 50, 20, 4),
        launch("cudaLaunchKernel", 55, 5, 40, 4),
        kernel("gemm", 60, 30, 40, 4),
    ]


def test_a_datapipe_iteration_is_data_loading():
    trace = read(datapipe())
    b = breakdown.of(trace)
    assert b.host_ms["DataLoader wait"] * 1000 == 30  # was read as CPU operators
    assert b.host_ms["CPU ops"] * 1000 == 20
    assert evidence.dataloader_wait(trace).value * 1000 == 30
    assert "aten::stack (in data loading)" in rows(trace)  # the pipe's own operators are the loader's
    theirs = plugin(datapipe())
    assert plugin_role(theirs, "DataLoader") == 30  # the plugin reads DataPipe ranges as data loading too


def nccl_rank(rank: int):
    """The plugin's test_distributed_nccl, one rank, with the step (0–235 µs) torch 2.x would record: a
    broadcast and an all-reduce queued by ``nccl:`` ranges on the host, their kernels on the device. As in
    the plugin's test no launch is recorded, so the device's work counts by time, clipped to the step."""
    host = {0: [(0, 75), (100, 20), (160, 75)], 1: [(0, 20), (25, 20), (160, 75)]}[rank]
    device = {0: [(16, 16), (130, 161), (162, 1556)], 1: [(8, 31), (30, 161), (562, 1058)]}[rank]
    return [
        step(1, 0, 235, tid=23803),
        op("nccl:broadcast", *host[0], 146, tid=23803),
        kernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)", *device[0], 28506, 146, stream=16),
        op("aten::add_", *host[1], 24504, tid=23803),
        kernel("void at::native::vectorized_elementwise_kernel", *device[1], 99765, 24504),
        op("nccl:all_reduce", *host[2], 2513, tid=25166),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", *device[2], 33218, 2513, stream=16),
    ]


def test_nccl_communication_is_its_kernels_and_device_busy_stays_in_the_step():
    zero, one = (breakdown.of(read(nccl_rank(r))) for r in (0, 1))
    # rank 0: kernels 16–32, 130–291, 162–1718 clipped to 0–235: 16–32 and 130–235 (was 1,604 µs)
    assert zero.device_busy_ms * 1000 == 16 + 105
    # its communication: the NCCL kernels 16–32 and 162–235, not the host's nccl: ranges (0–75, 160–235)
    assert zero.comm_ms * 1000 == 16 + 73
    # the nccl: ranges are the host's time queuing the kernels: CPU operators, with aten::add_
    assert zero.host_ms["CPU ops"] * 1000 == 75 + 20 + 75
    assert one.device_busy_ms * 1000 == 191 - 8  # 8–39 and 30–191 merged; 562–1620 is past the step
    assert one.comm_ms * 1000 == 31
    # differs by definition: the plugin counts the host's nccl: ranges as communication (0–75 and 160–235
    # with the kernels: 150 µs on rank 0); the kit keeps NCCL's kernels, as its documentation says
    theirs = plugin(nccl_rank(0))
    assert theirs.comm_overlap_costs[0].communication == 75 + 75
    assert plugin_role(theirs, "Kernel") == 105  # its compute kernels in the step agree: 130–235


def nccl_launched():
    """NCCL as torch 2.x records it: the all-reduce's kernel launched inside its nccl: range, and run long
    after the host moved on."""
    return [
        step(1, 0, 300),
        op("c10d::allreduce_", 100, 60, 5),
        op("nccl:all_reduce", 110, 40, 6, cat="user_annotation"),
        launch("cudaLaunchKernel", 120, 10, 60, 6),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 200, 500, 60, 6,
               stream=16),
    ]


def test_nccl_kernels_launched_in_the_step_count_whole_as_its_communication():
    b = breakdown.of(read(nccl_launched()))
    assert b.comm_ms * 1000 == 500 and b.device_busy_ms * 1000 == 500  # the kernel, whole (200–700)
    assert rows(read(nccl_launched()))["nccl:all_reduce"].self_device_us == 500


def gloo_rank():
    """The plugin's test_distributed_gloo_gpu, rank 0, with its step (0–156 µs): gloo's collectives run on the
    host, on two threads."""
    return [
        step(1, 0, 156, tid=23800),
        op("gloo:broadcast", 16, 38, 165, tid=23803),
        op("gloo:broadcast", 25, 36, 166, tid=23805),
        op("gloo:broadcast", 66, 18, 167, tid=23803),
        op("aten::add_", 0, 20, 24504, tid=23800),
        kernel("void at::native::vectorized_elementwise_kernel", 30, 101, 99765, 24504),
        op("gloo:all_reduce", 110, 18, 2513, tid=23805),
        op("gloo:all_reduce", 120, 36, 2516, tid=23803),
    ]


def test_gloo_communication_is_the_time_its_ranges_cover_in_the_step():
    b = breakdown.of(read(gloo_rank()))
    assert b.comm_ms * 1000 == (61 - 16) + (84 - 66) + (156 - 110)
    assert b.device_busy_ms * 1000 == 101  # no launch recorded: by time, 30–131, inside the step
    theirs = plugin(gloo_rank())
    assert theirs.comm_overlap_costs[0].communication == b.comm_ms * 1000  # the plugin agrees
    assert plugin_role(theirs, "Kernel") == b.device_busy_ms * 1000


# --- 5. a trace from an unsupported torch is refused, saying what it lacks --------------------------------

def test_a_torch_1_trace_is_refused_naming_what_is_missing():
    """The plugin's own test traces are torch 1.8's: Operator, Runtime, Kernel, Memcpy. Read as torch 2.x's
    they would hold no operator and no launch; the kit refuses them, naming the missing cpu_op."""
    old = [dict(e, cat={"cpu_op": "Operator", "user_annotation": "Operator", "cuda_runtime": "Runtime",
                        "kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}[e["cat"]])
           for e in all_categories()]
    with pytest.raises(evidence.TraceError, match=r"no cpu_op events.*Kernel, Memcpy, Memset, Operator, Runtime"):
        read(old)
    # the same events in torch 2.x's categories are read
    assert read(all_categories()).steps


def test_a_trace_of_steps_without_operators_is_still_read():
    """A 2.x trace whose steps ran no operator (a loop of sleeps) has no cpu_op either: not refused."""
    trace = read([step(1, 0, 100), x("time.sleep", "python_function", 10, 50)])
    assert breakdown.of(trace).host_ms["other"] * 1000 == 100
