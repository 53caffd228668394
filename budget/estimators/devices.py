"""Device figures for the time estimators: peak FLOP rates, memory bandwidth
and the host link.

``flops`` and ``roofline`` turn FLOPs and bytes into seconds with these figures. The GPUs
come from their vendor datasheets (dense figures: the tensor-core rates NVIDIA prints "with
sparsity" are halved); the host CPU has no datasheet we can trust, so it is measured once
per process (a matmul throughput probe and a large-copy bandwidth probe, a fraction of a
second) and cached, in memory and on disk (keyed by CPU model, torch version and thread
count; a missing or corrupt cache file is simply measured again).

Peaks are rates for *matmul-class* work (matmul, convolution, attention: tensor cores on a
GPU) per dtype, and a ``vector`` rate for the rest (CUDA cores, FP32). float32 matmuls and
convolutions use the TF32 tensor-core rate when torch would (``torch.backends.cuda.matmul.
allow_tf32``, ``torch.backends.cudnn.allow_tf32``). The measured CPU has one rate for every
dtype: its fp32 matmul throughput.

Names: ``h100`` (SXM5), ``h100-pcie``, ``h200`` (SXM), ``a100`` (SXM4 80GB), ``cpu`` (this
host, measured). :func:`get_device` raises a ValueError naming them.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

MATMUL_KINDS = ("matmul", "conv", "attention")


@dataclass(frozen=True)
class Device:
    """Peak rates of one device. Rates in FLOP/s, bandwidth in bytes/s."""

    key: str
    name: str
    matmul: Mapping[str, float]  # dtype name ("float32", "tf32", "bfloat16"...) -> FLOP/s
    vector: float  # FLOP/s of non-matmul work (FP32 CUDA cores; the measured rate on CPU)
    bandwidth: float  # bytes/s of device memory
    source: str
    measured: bool = False
    extra: Mapping[str, float] = field(default_factory=dict)  # probe details, for display
    # bytes/s of the host link in one direction (offload's copies: budget.core.offload);
    # 0 where offload frees nothing or the figure is unknown (the host CPU, measured GPUs)
    host_link: float = 0.0

    def peak(self, dtype: torch.dtype | None, kind: str = "matmul") -> float:
        """FLOP/s for work of ``kind`` ("matmul", "conv", "attention" or "other") in ``dtype``."""
        if kind not in MATMUL_KINDS:
            return self.vector
        name = _dtype_key(dtype)
        if name == "float32" and "tf32" in self.matmul:
            tf32 = {
                "matmul": torch.backends.cuda.matmul.allow_tf32,
                "conv": torch.backends.cudnn.allow_tf32,
            }.get(kind, False)
            if tf32:
                name = "tf32"
        return self.matmul.get(name, self.matmul["float32"])


def _dtype_key(dtype: torch.dtype | None) -> str:
    if dtype is None:
        return "float32"
    if dtype in (torch.bfloat16, torch.float16, torch.float64, torch.float32):
        return str(dtype).removeprefix("torch.")
    if dtype.is_floating_point and dtype.itemsize == 1:
        return "float8"
    return "float32"


def _nvidia(
    key: str,
    name: str,
    *,
    fp64: float,
    fp32: float,
    tf32: float,
    bf16: float,
    fp8: float | None,
    bandwidth: float,
    source: str,
    host_link: float,
) -> Device:
    matmul = {"float64": fp64, "float32": fp32, "tf32": tf32, "bfloat16": bf16, "float16": bf16}
    if fp8 is not None:
        matmul["float8"] = fp8
    return Device(
        key, name, matmul, vector=fp32, bandwidth=bandwidth, source=source, host_link=host_link
    )


T = 1e12
_H100_SHEET = (
    "NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/"
)
DEVICES: dict[str, Device] = {
    d.key: d
    for d in (
        _nvidia(
            "h100",
            "NVIDIA H100 SXM5 80GB",
            fp64=67 * T,  # FP64 tensor core
            fp32=67 * T,
            tf32=494.7 * T,  # 989 "with sparsity"
            bf16=989.4 * T,  # 1,979 with sparsity; FP16 the same
            fp8=1978.9 * T,  # 3,958 with sparsity
            bandwidth=3.35e12,
            host_link=64e9,  # PCIe Gen5 x16: 128 GB/s both ways
            source=f"{_H100_SHEET} (H100 SXM column; dense rates)",
        ),
        _nvidia(
            "h100-pcie",
            "NVIDIA H100 PCIe 80GB",
            fp64=51 * T,
            fp32=51 * T,
            tf32=378 * T,  # 756 with sparsity
            bf16=756.5 * T,  # 1,513 with sparsity
            fp8=1513 * T,  # 3,026 with sparsity
            bandwidth=2.0e12,
            host_link=64e9,  # PCIe Gen5 x16: 128 GB/s both ways
            source=f"{_H100_SHEET} (H100 PCIe column; dense rates)",
        ),
        _nvidia(
            "h200",
            "NVIDIA H200 SXM 141GB",
            fp64=67 * T,
            fp32=67 * T,
            tf32=494.7 * T,  # 989 with sparsity
            bf16=989.4 * T,  # 1,979 with sparsity
            fp8=1978.9 * T,  # 3,958 with sparsity
            bandwidth=4.8e12,
            host_link=64e9,  # PCIe Gen5 x16: 128 GB/s both ways
            source="NVIDIA H200 Tensor Core GPU datasheet, "
            "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM column; dense rates)",
        ),
        _nvidia(
            "a100",
            "NVIDIA A100 SXM4 80GB",
            fp64=19.5 * T,  # FP64 tensor core
            fp32=19.5 * T,
            tf32=156 * T,  # 312 with sparsity
            bf16=312 * T,  # 624 with sparsity
            fp8=None,  # no FP8 on Ampere
            bandwidth=2.039e12,
            host_link=32e9,  # PCIe Gen4 x16: 64 GB/s both ways
            source="NVIDIA A100 Tensor Core GPU datasheet, "
            "https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB SXM column; dense rates)",
        ),
    )
}
HOST = "cpu"


def device_names() -> list[str]:
    """Names :func:`get_device` accepts."""
    return sorted([*DEVICES, HOST])


def check_device_name(name: str) -> str:
    """``name`` normalised; ValueError naming the table when it is not in it."""
    key = name.strip().lower()
    if key not in DEVICES and key != HOST:
        raise ValueError(f"unknown device {name!r}; available: {', '.join(device_names())}")
    return key


def get_device(name: str) -> Device:
    """A device of the table by name; ``"cpu"`` is this host, measured on first use."""
    key = check_device_name(name)
    return host_cpu() if key == HOST else DEVICES[key]


def match_gpu_name(gpu_name: str) -> str | None:
    """The table entry for a CUDA device name (``torch.cuda.get_device_name``), if any."""
    n = gpu_name.lower()
    if "h200" in n:
        return "h200"
    if "h100" in n:
        return "h100-pcie" if "pcie" in n else "h100"
    if "a100" in n:
        return "a100"
    return None


def device_of(device: torch.device) -> Device:
    """Figures for the device tensors live on: the table entry for a known GPU, a measured
    entry for an unknown one, the measured host for CPU (and meta) tensors."""
    if device.type in ("cpu", "meta"):
        return host_cpu()
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"the graph is on {device} but CUDA is not available here to identify the "
                f"GPU; name the target device, e.g. 'roofline:h100' "
                f"(available: {', '.join(device_names())})"
            )
        index = device.index if device.index is not None else torch.cuda.current_device()
        key = match_gpu_name(torch.cuda.get_device_name(index))
        return DEVICES[key] if key else _measured(torch.device("cuda", index))
    raise ValueError(
        f"no figures for device type {device.type!r}; name a device of the table "
        f"(available: {', '.join(device_names())})"
    )


# --------------------------------------------------------------------------- measuring

_MEASURED: dict[str, Device] = {}
# The probes' version, kept with the figures on disk: a file another version wrote is
# measured again.
PROBE_VERSION = 2


def host_cpu() -> Device:
    """This host's CPU, measured once per process and thread count (cached on disk too)."""
    return _measured(torch.device("cpu"))


def cpu_model() -> str:
    """This host's CPU model, as /proc/cpuinfo names it (else what platform says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def cache_dir() -> Path | None:
    """Where measured figures are kept: ``$BUDGET_CACHE_DIR``, else the user cache dir.
    ``BUDGET_CACHE_DIR=""`` disables the disk cache."""
    env = os.environ.get("BUDGET_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "budget"


def _cache_file(label: str, kind: str = "device") -> Path | None:
    d = cache_dir()
    if d is None:
        return None
    safe = "".join(c if c.isalnum() else "-" for c in label).strip("-")[:150]
    return d / f"{kind}-{safe}.json"


def _load(path: Path | None, label: str) -> Device | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("label") != label or data.get("probe") != PROBE_VERSION:
            return None
        dev = Device(**data["device"])
        ok = dev.vector > 0 and dev.bandwidth > 0 and dev.matmul.get("float32", 0) > 0
        return dev if ok else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing or corrupt: measure again


def _store(path: Path | None, label: str, dev: Device) -> None:
    write_cache(path, {"label": label, "probe": PROBE_VERSION, "device": asdict(dev)})


def write_cache(path: Path | None, data: object) -> None:
    """Write a cache file whole (a reader never sees half of one); ``None``: no disk cache."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home is not an error: the figures stay cached in memory


def _measured(device: torch.device) -> Device:
    if device.type == "cpu":
        label = f"{cpu_model()}|torch {torch.__version__}|{torch.get_num_threads()} threads"
    else:
        label = f"{torch.cuda.get_device_name(device)}|torch {torch.__version__}|{device}"
    if label in _MEASURED:
        return _MEASURED[label]
    path = _cache_file(label) if device.type == "cpu" else None
    dev = _load(path, label)
    if dev is None:
        dev = measure(device, label)
        _store(path, label, dev)
    _MEASURED[label] = dev
    return dev


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best(fn, device: torch.device, repeats: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    _sync(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def _probe_matmul(n: int, device: torch.device) -> float:
    gen = torch.Generator(device=device).manual_seed(0)  # the caller's RNG is not touched
    a = torch.randn(n, n, device=device, generator=gen)
    b = torch.randn(n, n, device=device, generator=gen)
    c = torch.empty(n, n, device=device)
    return _best(lambda: torch.mm(a, b, out=c), device, 5)


def _probe_copy(words: int, device: torch.device) -> float:
    src = torch.ones(words, device=device)
    dst = torch.empty_like(src)
    return _best(lambda: dst.copy_(src), device, 5)


def measure(device: torch.device, label: str = "") -> Device:
    """Probe ``device``: best-of-N fp32 matmul throughput and large-copy bandwidth.

    A CPU gets a 768^3 matmul (0.9 GFLOP) and a 64 MiB copy (larger than the last-level
    cache, so it measures memory, not cache): a fraction of a second. A GPU gets a 4096^3 matmul and a 256 MiB copy.
    """
    from ..runtime._torch_private import _disable_current_modes

    start = time.perf_counter()
    n = 768 if device.type == "cpu" else 4096
    words = (64 if device.type == "cpu" else 256) * 2**20 // 4  # above any last-level cache
    # Real tensors, whatever the caller's modes: the estimators first ask for the host's
    # figures while a graph is partitioned, under compile's FakeTensorMode, where the
    # probes would run on fake tensors, time nothing, and leave rates tens of times too high.
    with _disable_current_modes(), torch.no_grad():
        mm_s = _probe_matmul(n, device)
        copy_s = _probe_copy(words, device)
    flops = 2 * n**3 / mm_s
    bandwidth = 2 * words * 4 / copy_s  # read + write
    what = "this host's CPU" if device.type == "cpu" else f"{device}"
    return Device(
        key=HOST if device.type == "cpu" else str(device),
        name=label or what,
        matmul={"float32": flops},
        vector=flops,
        bandwidth=bandwidth,
        source=f"measured on {what}: fp32 {n}x{n} matmul and {words * 4 // 2**20} MiB copy, "
        "best of 5",
        measured=True,
        extra={"probe_seconds": time.perf_counter() - start, "threads": torch.get_num_threads()},
    )
