"""Where a run's memory is measured, from outside its processes.

Two figures, both read by the checker's process, never reported by the run:

* **host memory**: every few milliseconds, the resident memory (``VmRSS``) of
  every process of the run, summed, and each process's high-water mark
  (``VmHWM``, the kernel's own peak of its resident memory, which catches a
  peak between two samples). The run's peak is the larger of the two: a
  process that resets its high-water mark (``/proc/self/clear_refs``) still
  has every sample taken while its memory was held. And what the run's
  processes hold without it being resident: the growth of each one's
  private memory (``VmData``, what it has asked the kernel for and not given
  back) since it was first seen, added to the resident memory it started
  with. Pages handed back with ``madvise(MADV_DONTNEED)`` leave the resident
  memory and stay in this figure as long as the allocation lives. The peak
  graded is the largest of the three. The limit check
  (``memory_mb``) uses PSS instead, which counts the pages forked DataLoader
  workers share once, at a slower pace (``execute``).
* **device memory** (CUDA): what the driver reports per process, sampled in
  a thread, through NVIDIA's management library (NVML, by its official
  binding ``nvidia-ml-py``: no process started, a few microseconds an ask),
  or ``nvidia-smi --query-compute-apps`` where the binding is missing (the
  checker's own helper, never counted as the run's process); where the
  driver lists none of the run's processes (a container with its own PID
  namespace), the growth of the device's used memory since the run started.
  The run's own ``torch.cuda.max_memory_reserved()`` is kept for reference
  and never graded: the learner's process could report less.

On CUDA both are graded, the host's and the device's, and the worse ratio
decides: a leak moved from the device to the host is still a leak.

A run forked from the fork server starts with the server's pages (torch,
imported once): every version of a check starts from the same ones, so the
peaks compare, and the report quotes them as they are.
"""

from __future__ import annotations

import functools
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_S = 0.02  # how often a memory-graded run's processes are looked at
DEVICE_SAMPLE_S = 0.1  # the pause between two asks of the driver (nvidia-smi's ask itself takes tens of ms)


def kb(path: str, field_name: str) -> int | None:
    """A ``Name:  123 kB`` field of a /proc file, in kB; None when the file or the field is not there."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field_name):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def pss_mb(members: list[int], limit_mb: float = float("inf")) -> float:
    """Memory of the run's processes as the machine pays for it, in MB (Linux; 0 elsewhere).

    Proportional set size (PSS, from /proc/PID/smaps_rollup): a page shared by
    N processes counts 1/N in each, so forked DataLoader workers, which share
    most of their parent's pages, are not counted N times over. Where the
    kernel has no smaps_rollup, resident memory (RSS) is used instead. Reading
    smaps_rollup walks a process's page tables, so it is read only once the
    resident memory, which is never less, is past ``limit_mb``.
    """
    rss_kb = sum(kb(f"/proc/{pid}/status", "VmRSS:") or 0 for pid in members)
    if rss_kb <= limit_mb * 1024:  # PSS is never more than RSS: the cheap figure settles it
        return rss_kb / 1024
    return sum(_pss_or_rss_kb(pid) for pid in members) / 1024


def _pss_or_rss_kb(pid: int) -> int:
    pss = kb(f"/proc/{pid}/smaps_rollup", "Pss:")
    return pss if pss is not None else (kb(f"/proc/{pid}/status", "VmRSS:") or 0)


def _rss_hwm_data_kb(pid: int) -> tuple[int, int, int]:
    """A process's resident memory, its high-water mark and its private memory (VmData), in kB."""
    rss = hwm = data = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
            elif line.startswith("VmData:"):
                data = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return rss, hwm, data


@dataclass
class Watch:
    """The peak memory of one run, sampled from outside while it runs."""

    members: list[int] = field(default_factory=list)  # the run's processes, as last scanned
    rss_peak_kb: int = 0  # the largest sum of every process's resident memory at one sample
    hwm_peak_kb: int = 0  # the largest high-water mark any one process had
    committed_peak_kb: int = 0  # resident memory at the start, plus the largest growth of private memory since
    start_rss_kb: int | None = None  # every process's resident memory at the first sample
    start_data_kb: dict[int, int] = field(default_factory=dict)  # each process's private memory, first seen
    samples: int = 0
    device: "DeviceWatch | None" = None

    def sample(self) -> None:
        total = growth = 0
        for pid in self.members:
            rss, hwm, data = _rss_hwm_data_kb(pid)
            if not rss:  # gone, or not readable
                continue
            total += rss
            growth += data - self.start_data_kb.setdefault(pid, data)
            self.hwm_peak_kb = max(self.hwm_peak_kb, hwm)
        self.rss_peak_kb = max(self.rss_peak_kb, total)
        if self.start_rss_kb is None and total:
            self.start_rss_kb = total
        self.committed_peak_kb = max(self.committed_peak_kb, (self.start_rss_kb or 0) + growth)
        self.samples += 1

    @property
    def host_peak_mb(self) -> float:
        return max(self.rss_peak_kb, self.hwm_peak_kb, self.committed_peak_kb) / 1024

    def start_device(self) -> None:
        """On a machine with NVIDIA's driver, sample the device memory too (a thread)."""
        if _nvml() is not None or shutil.which("nvidia-smi"):
            self.device = DeviceWatch(self)
            self.device.start()

    def stop(self) -> None:
        if self.device is not None:
            self.device.stop()

    def figures(self, run_device: str, reported_device_mb: float | None) -> dict[str, float | str | bool | None]:
        """What the report keeps of one run: its host peak (``peak_mb``), always graded; its device peak
        as the driver saw it (``device_peak_mb``), graded too when the run says it ran on CUDA or the
        driver saw memory of its processes (the run's word for its device is not taken alone). A figure
        that could not be read is None, never 0; the run's own report is kept for reference only."""
        host = self.host_peak_mb
        device = self.device.peak_mb if self.device is not None else None
        return {
            "peak_mb": round(host, 1) if host > 0 else None,
            "rss_peak_mb": round(self.rss_peak_kb / 1024, 1), "hwm_peak_mb": round(self.hwm_peak_kb / 1024, 1),
            "committed_peak_mb": round(self.committed_peak_kb / 1024, 1),
            "samples": self.samples,
            "device_peak_mb": round(device, 1) if device else None,
            "device_graded": run_device.startswith("cuda") or bool(device),
            "device_source": self.device.source if self.device is not None else None,
            "reported_device_mb": round(reported_device_mb, 1) if reported_device_mb is not None else None,
            "measured": "host memory (every process's resident memory, and what it holds without it being "
                        "resident), from /proc"
                        + ("; device memory, from the driver" if run_device.startswith("cuda") or device else ""),
        }


_APPS = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
_USED = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]


def _ask(command: list[str]) -> list[list[str]]:
    """nvidia-smi's CSV answer, as rows of cells; started as the checker's helper, so that the run's
    process tree, whose CPU time and memory are graded, never takes it for one of the run's."""
    from . import processes

    out = processes.helper(command, timeout=5)
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]


@functools.lru_cache(maxsize=1)
def _nvml():
    """NVIDIA's management library, initialised once; None where the binding or the driver is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - no binding, no driver, no device: nvidia-smi, or no device figure
        return None


def _handles(nv) -> list:
    return [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]


def _apps() -> list[list[str]]:
    """Every process holding device memory, as ``[pid, MiB]`` (``"[N/A]"`` where the driver cannot say)."""
    nv = _nvml()
    if nv is None:
        return _ask(_APPS)
    try:
        return [[str(p.pid), "[N/A]" if p.usedGpuMemory is None else str(p.usedGpuMemory / 2**20)]
                for handle in _handles(nv) for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)]
    except nv.NVMLError:
        return []


def _used() -> list[list[str]]:
    """Each device's used memory, as ``[MiB]``."""
    nv = _nvml()
    if nv is None:
        return _ask(_USED)
    try:
        return [[str(nv.nvmlDeviceGetMemoryInfo(handle).used / 2**20)] for handle in _handles(nv)]
    except nv.NVMLError:
        return []


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


class DeviceWatch(threading.Thread):
    """Device memory of the run's processes, as the driver reports it, in MB."""

    def __init__(self, watch: Watch):
        super().__init__(daemon=True)
        self.watch = watch
        self.per_process_mb: float | None = None
        self.growth_mb: float | None = None
        self._halt = threading.Event()
        self._base_mb = self._used_mb()

    def _used_mb(self) -> float | None:
        values = [_number(row[0]) for row in _used() if row]
        values = [v for v in values if v is not None]
        return sum(values) if values else None

    def run(self) -> None:
        while not self._halt.wait(DEVICE_SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        mine = {str(pid) for pid in self.watch.members}
        rows = [r for r in _apps() if len(r) >= 2 and r[0] in mine]
        values = [v for r in rows if (v := _number(r[1])) is not None]  # "[N/A]" (MIG, vGPU) is no figure
        if values and sum(values) > 0:
            self.per_process_mb = max(self.per_process_mb or 0.0, sum(values))
        used_now = self._used_mb()
        if used_now is not None and self._base_mb is not None and used_now - self._base_mb > 0:
            self.growth_mb = max(self.growth_mb or 0.0, used_now - self._base_mb)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=6)

    @property
    def peak_mb(self) -> float | None:
        return self.per_process_mb if self.per_process_mb is not None else self.growth_mb

    @property
    def source(self) -> str | None:
        how = "NVML" if _nvml() is not None else "nvidia-smi"
        if self.per_process_mb is not None:
            return f"the driver ({how}), per process"
        if self.growth_mb is not None:
            return f"the driver ({how}), the device's used memory since the run started"
        return None
