"""Which versioned NVML entry points a driver's libnvidia-ml.so.1 exports, by driver version.

nvidia-ml-py looks every entry point up by name when it is called (``_nvmlGetFunctionPointer``): a symbol the driver
lacks raises ``NVMLError_FunctionNotFound``, and the unversioned process-list wrappers, which call the ``_v3`` symbol
under ``throwOnVersionMismatch``, turn that into ``NVMLLibraryMismatchError`` (a plain ``Exception``). gpusim's
libnvidia-ml.so.1 (lab/gpusim/libnvml) is linked per driver with this table's symbols only (``exported``, the linker
version script build.py writes), so on an old driver nvidia-ml-py fails the way it does on the real library.

Source: NVIDIA's nvml.h as shipped with each driver release in NVIDIA/nvidia-settings (``src/nvml.h``), the release
that first (or no longer) declares each symbol found with ``git log -S <symbol> -- src/nvml.h``:

* ``nvmlDevice{Compute,Graphics,MPSCompute}RunningProcesses_v2``: 450.66.
* ``..._v3``: 510.39.01; removed in 535.98 (the header maps the unversioned names back to ``_v2``; the library has
  no ``_v3``: XuehaiPan/nvitop#88, #89) and back in 535.104.05.
* ``nvmlDeviceGetGpuInstanceProfileInfoV``, ``nvmlGpuInstanceGetComputeInstanceProfileInfoV``,
  ``nvmlDeviceGetMemoryInfo_v2``: 510.39.01.
* ``nvmlComputeInstanceGetInfo_v2``: 455.38.
* ``nvmlDeviceGetGpuInstancePossiblePlacements_v2``: 470.42.01.

A state may also name symbols in ``missing_symbols`` (a fault: a test drives one versioned call without its newest
symbol on any driver).
"""

from __future__ import annotations

_PROCESS_LISTS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
                  "nvmlDeviceGetMPSComputeRunningProcesses")

# symbol -> [(first version that has it, first version that no longer has it or None)]
SINCE = {}
for _name in _PROCESS_LISTS:
    SINCE[_name + "_v2"] = [("450.66", None)]
    SINCE[_name + "_v3"] = [("510.39.01", "535.98"), ("535.104.05", None)]
for _name in ("nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
              "nvmlDeviceGetMemoryInfo_v2"):
    SINCE[_name] = [("510.39.01", None)]
SINCE["nvmlComputeInstanceGetInfo_v2"] = [("455.38", None)]
SINCE["nvmlDeviceGetGpuInstancePossiblePlacements_v2"] = [("470.42.01", None)]


def _version(text):
    return tuple(int(p) for p in str(text).split("."))


def exported(st, symbol):
    """Whether the driver of state ``st`` exports ``symbol`` (symbols outside the table: always)."""
    if symbol in (st.get("missing_symbols") or ()):
        return False
    ranges = SINCE.get(symbol)
    if ranges is None:
        return True
    drv = _version(st["driver_version"])
    return any(_version(lo) <= drv and (hi is None or drv < _version(hi)) for lo, hi in ranges)
