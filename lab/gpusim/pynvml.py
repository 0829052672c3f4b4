"""gpusim: a drop-in ``pynvml`` (nvidia-ml-py 13.615.71 API) backed by a JSON machine state.

Put ``lab/gpusim`` first on PYTHONPATH and set GPUSIM_STATE to a state file (see
README.md). Names, constants, ctypes structures, NVMLError subclasses and return
types mirror nvidia-ml-py; only the subset a GPU inventory, a MIG manager and a health
gate (gpusim/health.py) use is provided, and tests/lab/test_gpusim_api.py checks every public name against
the real module. Handles are real ctypes pointers (opaque, never dereference them).
"""

# pylint: disable=invalid-name,too-many-lines,missing-function-docstring,missing-class-docstring,protected-access

from __future__ import annotations

import ctypes
import string
import sys
from ctypes import (POINTER, Structure, Union, c_char, c_int, c_uint, c_uint8, c_uint16, c_uint32,
                    c_ulonglong, c_void_p, sizeof)
from functools import wraps

from gpusim import api as _api
from gpusim import api_health as _ah
from gpusim import api_mig as _api_mig
from gpusim import health as _h
from gpusim import machine as _m
from gpusim import state as _state
from gpusim import symbols as _symbols

GPUSIM = True  # lets a test tell the stand-in from the real binding; product code must not use it

# ---------------------------------------------------------------- constants (values as in nvidia-ml-py)
_nvmlEnableState_t = c_uint
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

_nvmlBrandType_t = c_uint
NVML_BRAND_UNKNOWN = 0
NVML_BRAND_QUADRO = 1
NVML_BRAND_TESLA = 2
NVML_BRAND_NVS = 3
NVML_BRAND_GRID = 4
NVML_BRAND_GEFORCE = 5
NVML_BRAND_TITAN = 6
NVML_BRAND_NVIDIA_VAPPS = 7
NVML_BRAND_NVIDIA_VPC = 8
NVML_BRAND_NVIDIA_VCS = 9
NVML_BRAND_NVIDIA_VWS = 10
NVML_BRAND_NVIDIA_CLOUD_GAMING = 11
NVML_BRAND_QUADRO_RTX = 12
NVML_BRAND_NVIDIA_RTX = 13
NVML_BRAND_NVIDIA = 14

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

_nvmlDeviceArchitecture_t = c_uint
NVML_DEVICE_ARCH_KEPLER = 2
NVML_DEVICE_ARCH_MAXWELL = 3
NVML_DEVICE_ARCH_PASCAL = 4
NVML_DEVICE_ARCH_VOLTA = 5
NVML_DEVICE_ARCH_TURING = 6
NVML_DEVICE_ARCH_AMPERE = 7
NVML_DEVICE_ARCH_ADA = 8
NVML_DEVICE_ARCH_HOPPER = 9
NVML_DEVICE_ARCH_BLACKWELL = 10
NVML_DEVICE_ARCH_UNKNOWN = 0xffffffff

NVML_INIT_FLAG_NO_GPUS = (1 << 0)
NVML_INIT_FLAG_NO_ATTACH = (1 << 1)
NVML_INIT_FLAG_FORCE_INIT = (1 << 2)

NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE = 16
NVML_DEVICE_UUID_BUFFER_SIZE = 80
NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96
NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80
NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE = 80
NVML_DEVICE_NAME_BUFFER_SIZE = 64
NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
NVML_DEVICE_SERIAL_BUFFER_SIZE = 30
NVML_DEVICE_PART_NUMBER_BUFFER_SIZE = 80
NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE = 32
NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32
NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16
NVML_GRID_LICENSE_BUFFER_SIZE = 128
NVML_GRID_LICENSE_FEATURE_MAX_COUNT = 3
NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT = "%04X:%02X:%02X.0"
NVML_DEVICE_PCI_BUS_ID_FMT = "%08X:%02X:%02X.0"
NVML_VALUE_NOT_AVAILABLE_ulonglong = c_ulonglong(-1)
NVML_VALUE_NOT_AVAILABLE_uint = c_uint(-1)
NVML_DEVICE_UUID_ASCII_LEN = 41
NVML_DEVICE_UUID_BINARY_LEN = 16

NVML_GPU_VIRTUALIZATION_MODE_NONE = 0
NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH = 1
NVML_GPU_VIRTUALIZATION_MODE_VGPU = 2
NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU = 3
NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA = 4

_nvmlHostVgpuMode_t = c_uint
NVML_HOST_VGPU_MODE_NON_SRIOV = 0
NVML_HOST_VGPU_MODE_SRIOV = 1

_nvmlGridLicenseFeatureCode_t = c_uint
NVML_GRID_LICENSE_FEATURE_CODE_UNKNOWN = 0
NVML_GRID_LICENSE_FEATURE_CODE_VGPU = 1
NVML_GRID_LICENSE_FEATURE_CODE_NVIDIA_RTX = 2
NVML_GRID_LICENSE_FEATURE_CODE_VWORKSTATION = 2
NVML_GRID_LICENSE_FEATURE_CODE_GAMING = 3
NVML_GRID_LICENSE_FEATURE_CODE_COMPUTE = 4
NVML_GRID_LICENSE_FEATURE_CODE_VGAMEDEV = 5

# nvidia-ml-py 13.615.71 defines these with a trailing comma, i.e. as 1-tuples; mirrored on purpose
# so product code that compares against them behaves as it will on real hosts.
NVML_GRID_LICENSE_EXPIRY_NOT_AVAILABLE = (0,)
NVML_GRID_LICENSE_EXPIRY_INVALID = (1,)
NVML_GRID_LICENSE_EXPIRY_VALID = (2,)
NVML_GRID_LICENSE_EXPIRY_NOT_APPLICABLE = (3,)
NVML_GRID_LICENSE_EXPIRY_PERMANENT = (4,)

NVML_GRID_LICENSE_STATE_UNKNOWN = 0
NVML_GRID_LICENSE_STATE_UNINITIALIZED = 1
NVML_GRID_LICENSE_STATE_UNLICENSED_UNRESTRICTED = 2
NVML_GRID_LICENSE_STATE_UNLICENSED_RESTRICTED = 3
NVML_GRID_LICENSE_STATE_UNLICENSED = 4
NVML_GRID_LICENSE_STATE_LICENSED = 5

NVML_UUID_TYPE_NONE = 0
NVML_UUID_TYPE_ASCII = 1
NVML_UUID_TYPE_BINARY = 2

NVML_GPU_INSTANCE_ID_ANY = 0xFFFFFFFF
NVML_COMPUTE_INSTANCE_ID_ANY = 0xFFFFFFFF

NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1

NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9
NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX = 0xA
NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX = 0xB
NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX = 0xC
NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME = 0xD
NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME = 0xE
NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME = 0xF
NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME = 0x10
NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX = 0x11
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12

NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL = 0x8
NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9

NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT = 0x1

nvmlMemory_v2 = 0x02000028
nvmlGpuInstanceProfileInfo_v2 = 0x02000098
nvmlComputeInstanceProfileInfo_v2 = 0x02000088
nvmlPciInfoExt_v1 = 0x1000040
SystemDriverBranchInfo_v1 = 0x1000054

_nvmlProcessMode_t = c_uint
NVML_PROCESS_MODE_COMPUTE = 0
NVML_PROCESS_MODE_GRAPHICS = 1
NVML_PROCESS_MODE_MPS = 2

# health readings (gpusim/health.py)
_nvmlTemperatureThresholds_t = c_uint
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2
NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3
NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN = 4
NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR = 5
NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX = 6
NVML_TEMPERATURE_THRESHOLD_GPS_CURR = 7
NVML_TEMPERATURE_THRESHOLD_COUNT = 8

# nvidia-ml-py defines NVML_TEMPERATURE_GPU_MAX = 1 (COUNT = 2); nvml.h has only NVML_TEMPERATURE_GPU (COUNT = 1).
_nvmlTemperatureSensors_t = c_uint
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_GPU_MAX = 1
NVML_TEMPERATURE_COUNT = 2

_nvmlEccBitType_t = c_uint
NVML_SINGLE_BIT_ECC = 0
NVML_DOUBLE_BIT_ECC = 1
NVML_ECC_ERROR_TYPE_COUNT = 2

_nvmlEccCounterType_t = c_uint
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_ECC_COUNTER_TYPE_COUNT = 2

_nvmlMemoryErrorType_t = c_uint
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_MEMORY_ERROR_TYPE_COUNT = 2

_nvmlPageRetirementCause_t = c_uint
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_PAGE_RETIREMENT_CAUSE_COUNT = 2

nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonUserDefinedClocks = nvmlClocksEventReasonApplicationsClocksSetting
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSyncBoost = 0x0000000000000010
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksEventReasonDisplayClockSetting = 0x0000000000000100
nvmlClocksEventReasonNone = 0x0000000000000000
nvmlClocksEventReasonAll = (nvmlClocksEventReasonNone | nvmlClocksEventReasonGpuIdle
                            | nvmlClocksEventReasonApplicationsClocksSetting | nvmlClocksEventReasonSwPowerCap
                            | nvmlClocksEventReasonHwSlowdown | nvmlClocksEventReasonSyncBoost
                            | nvmlClocksEventReasonSwThermalSlowdown | nvmlClocksEventReasonHwThermalSlowdown
                            | nvmlClocksEventReasonHwPowerBrakeSlowdown | nvmlClocksEventReasonDisplayClockSetting)

# the deprecated names (nvidia-ml-py keeps both; the throttle set adds BoardLimit and Reliability)
nvmlClocksThrottleReasonGpuIdle = 0x0000000000000001
nvmlClocksThrottleReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksThrottleReasonUserDefinedClocks = nvmlClocksThrottleReasonApplicationsClocksSetting
nvmlClocksThrottleReasonSwPowerCap = 0x0000000000000004
nvmlClocksThrottleReasonHwSlowdown = 0x0000000000000008
nvmlClocksThrottleReasonSyncBoost = 0x0000000000000010
nvmlClocksThrottleReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksThrottleReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksThrottleReasonDisplayClockSetting = 0x0000000000000100
nvmlClocksThrottleReasonBoardLimit = 0x0000000000000200
nvmlClocksThrottleReasonReliability = 0x0000000000000400
nvmlClocksThrottleReasonNone = 0x0000000000000000
nvmlClocksThrottleReasonAll = (nvmlClocksThrottleReasonNone | nvmlClocksThrottleReasonGpuIdle
                               | nvmlClocksThrottleReasonApplicationsClocksSetting | nvmlClocksThrottleReasonSwPowerCap
                               | nvmlClocksThrottleReasonHwSlowdown | nvmlClocksThrottleReasonSyncBoost
                               | nvmlClocksThrottleReasonSwThermalSlowdown | nvmlClocksThrottleReasonHwThermalSlowdown
                               | nvmlClocksThrottleReasonHwPowerBrakeSlowdown
                               | nvmlClocksThrottleReasonDisplayClockSetting | nvmlClocksThrottleReasonBoardLimit
                               | nvmlClocksThrottleReasonReliability)

nvmlTemperature_v1 = 0x100000C


# vGPU scheduler (nvidia-ml-py: "vGPU scheduler policy defines"); rules in gpusim/vgpu_sched.py
NVML_VGPU_SCHEDULER_POLICY_UNKNOWN = 0
NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT = 1
NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE = 2
NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE = 3
NVML_SUPPORTED_VGPU_SCHEDULER_POLICY_COUNT = 3
NVML_VGPU_SCHEDULER_ARR_DEFAULT = 0
NVML_VGPU_SCHEDULER_ARR_DISABLE = 1
NVML_VGPU_SCHEDULER_ARR_ENABLE = 2


# ---------------------------------------------------------------- errors (same generation scheme as nvidia-ml-py)
class NVMLLibraryMismatchError(Exception):
    pass


# libnvidia-ml's nvmlErrorString() texts: gpusim/api.py (one table for this stand-in and the library).
_ERROR_STRINGS = _api.ERROR_STRINGS


class NVMLError(Exception):
    _valClassMapping = {}
    _errcode_to_string = dict(_ERROR_STRINGS)

    def __new__(typ, value):  # pylint: disable=bad-classmethod-argument
        cls = NVMLError._valClassMapping.get(value, typ) if typ == NVMLError else typ
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self):
        if self.value not in NVMLError._errcode_to_string:
            NVMLError._errcode_to_string[self.value] = nvmlErrorString(self.value)
        return NVMLError._errcode_to_string[self.value]

    def __eq__(self, other):
        return self.value == other.value


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError('nvmlErrorCode %s is not valid' % nvmlErrorCode)
    return NVMLError._valClassMapping[nvmlErrorCode]


def _extractNVMLErrorsAsClasses():
    this_module = sys.modules[__name__]
    for err_name in [x for x in dir(this_module) if x.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        err_val = getattr(this_module, err_name)

        def gen_new(val):
            def new(typ, *args):  # pylint: disable=unused-argument
                return NVMLError.__new__(typ, val)
            return new
        new_error_class = type(class_name, (NVMLError,), {'__new__': gen_new(err_val)})
        new_error_class.__module__ = __name__
        setattr(this_module, class_name, new_error_class)
        NVMLError._valClassMapping[err_val] = new_error_class


_extractNVMLErrorsAsClasses()


def _err(code, why=""):
    e = NVMLError(code)
    e.gpusim_reason = why  # extra attribute to ease debugging; str(e) stays as NVML's
    return e


def _nvmlCheckReturn(ret):
    if ret != NVML_SUCCESS:
        raise NVMLError(ret)
    return ret


def nvmlErrorString(result):
    return _api.error_string(result)


# ---------------------------------------------------------------- structures (field lists as in nvidia-ml-py)
class nvmlFriendlyObject:
    def __init__(self, dictionary):
        for x in dictionary:
            setattr(self, x, dictionary[x])

    def __str__(self):
        return self.__dict__.__str__()


def nvmlStructToFriendlyObject(struct):
    d = {}
    for x in struct._fields_:
        key = x[0]
        value = getattr(struct, key)
        d[key] = value.decode() if isinstance(value, bytes) else value
    return nvmlFriendlyObject(d)


class _PrintableStructure(Structure):
    _fmt_ = {}

    def __str__(self):
        result = []
        for x in self._fields_:
            key = x[0]
            value = getattr(self, key)
            fmt = self._fmt_.get(key, self._fmt_.get("<default>", "%s"))
            result.append(("%s: " + fmt) % (key, value))
        return self.__class__.__name__ + "(" + ", ".join(result) + ")"

    def __getattribute__(self, name):
        res = super().__getattribute__(name)
        if isinstance(res, bytes):
            return res.decode()
        return res

    def __setattr__(self, name, value):
        if isinstance(value, str):
            value = value.encode()
        super().__setattr__(name, value)


class struct_c_nvmlDevice_t(Structure):
    pass


c_nvmlDevice_t = POINTER(struct_c_nvmlDevice_t)


class struct_c_nvmlGpuInstance_t(Structure):
    pass


c_nvmlGpuInstance_t = POINTER(struct_c_nvmlGpuInstance_t)


class struct_c_nvmlComputeInstance_t(Structure):
    pass


c_nvmlComputeInstance_t = POINTER(struct_c_nvmlComputeInstance_t)


class nvmlPciInfoExt_v1_t(_PrintableStructure):
    _fields_ = [
        ('version', c_uint),
        ('domain', c_uint),
        ('bus', c_uint),
        ('device', c_uint),
        ('pciDeviceId', c_uint),
        ('pciSubSystemId', c_uint),
        ('baseClass', c_uint),
        ('subClass', c_uint),
        ('busId', c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
    ]


class nvmlPciInfo_t(_PrintableStructure):
    _fields_ = [
        ('busIdLegacy', c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE),
        ('domain', c_uint),
        ('bus', c_uint),
        ('device', c_uint),
        ('pciDeviceId', c_uint),
        ('pciSubSystemId', c_uint),
        ('busId', c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
    ]
    _fmt_ = {
        'domain': "0x%08X",
        'bus': "0x%02X",
        'device': "0x%02X",
        'pciDeviceId': "0x%08X",
        'pciSubSystemId': "0x%08X",
    }


class c_nvmlSystemDriverBranchInfo_v1_t(_PrintableStructure):
    _fields_ = [
        ('version', c_uint),
        ("branch", c_char * NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE),
    ]


class c_nvmlMemory_t(_PrintableStructure):
    _fields_ = [
        ('total', c_ulonglong),
        ('free', c_ulonglong),
        ('used', c_ulonglong),
    ]
    _fmt_ = {'<default>': "%d B"}


class c_nvmlMemory_v2_t(_PrintableStructure):
    _fields_ = [
        ('version', c_uint),
        ('total', c_ulonglong),
        ('reserved', c_ulonglong),
        ('free', c_ulonglong),
        ('used', c_ulonglong),
    ]
    _fmt_ = {'<default>': "%d B"}


class c_nvmlProcessInfo_v2_t(_PrintableStructure):
    _fields_ = [
        ('pid', c_uint),
        ('usedGpuMemory', c_ulonglong),
        ('gpuInstanceId', c_uint),
        ('computeInstanceId', c_uint),
    ]
    _fmt_ = {'usedGpuMemory': "%d B"}


c_nvmlProcessInfo_v3_t = c_nvmlProcessInfo_v2_t
c_nvmlProcessInfo_t = c_nvmlProcessInfo_v3_t


class c_nvmlGridLicenseExpiry_t(_PrintableStructure):
    _fields_ = [
        ('year', c_uint32),
        ('month', c_uint16),
        ('day', c_uint16),
        ('hour', c_uint16),
        ('min', c_uint16),
        ('sec', c_uint16),
        ('status', c_uint8),
    ]


class c_nvmlGridLicensableFeature_v4_t(_PrintableStructure):
    _fields_ = [
        ('featureCode', _nvmlGridLicenseFeatureCode_t),
        ('featureState', c_uint),
        ('licenseInfo', c_char * NVML_GRID_LICENSE_BUFFER_SIZE),
        ('productName', c_char * NVML_GRID_LICENSE_BUFFER_SIZE),
        ('featureEnabled', c_uint),
        ('licenseExpiry', c_nvmlGridLicenseExpiry_t),
    ]


class c_nvmlGridLicensableFeatures_v4_t(_PrintableStructure):
    _fields_ = [
        ('isGridLicenseSupported', c_int),
        ('licensableFeaturesCount', c_uint),
        ('gridLicensableFeatures', c_nvmlGridLicensableFeature_v4_t * NVML_GRID_LICENSE_FEATURE_MAX_COUNT),
    ]


class c_nvmlTemperature_v1_t(_PrintableStructure):
    _fields_ = [
        ('version', c_uint),
        ('sensorType', _nvmlTemperatureSensors_t),
        ('temperature', c_int),
    ]


class c_nvmlGpuInstancePlacement_t(Structure):
    _fields_ = [("start", c_uint),
                ("size", c_uint)]


class c_nvmlGpuInstanceProfileInfo_t(Structure):
    _fields_ = [("id", c_uint),
                ("isP2pSupported", c_uint),
                ("sliceCount", c_uint),
                ("instanceCount", c_uint),
                ("multiprocessorCount", c_uint),
                ("copyEngineCount", c_uint),
                ("decoderCount", c_uint),
                ("encoderCount", c_uint),
                ("jpegCount", c_uint),
                ("ofaCount", c_uint),
                ("memorySizeMB", c_ulonglong)]


class c_nvmlGpuInstanceProfileInfo_v2_t(_PrintableStructure):
    _fields_ = [("version", c_uint),
                ("id", c_uint),
                ("isP2pSupported", c_uint),
                ("sliceCount", c_uint),
                ("instanceCount", c_uint),
                ("multiprocessorCount", c_uint),
                ("copyEngineCount", c_uint),
                ("decoderCount", c_uint),
                ("encoderCount", c_uint),
                ("jpegCount", c_uint),
                ("ofaCount", c_uint),
                ("memorySizeMB", c_ulonglong),
                ("name", c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE)]

    def __init__(self):
        super().__init__(version=nvmlGpuInstanceProfileInfo_v2)


class c_nvmlGpuInstanceInfo_t(Structure):
    _fields_ = [("device", c_nvmlDevice_t),
                ("id", c_uint),
                ("profileId", c_uint),
                ("placement", c_nvmlGpuInstancePlacement_t)]


class c_nvmlComputeInstancePlacement_t(Structure):
    _fields_ = [("start", c_uint),
                ("size", c_uint)]


class c_nvmlComputeInstanceProfileInfo_t(Structure):
    _fields_ = [("id", c_uint),
                ("sliceCount", c_uint),
                ("instanceCount", c_uint),
                ("multiprocessorCount", c_uint),
                ("sharedCopyEngineCount", c_uint),
                ("sharedDecoderCount", c_uint),
                ("sharedEncoderCount", c_uint),
                ("sharedJpegCount", c_uint),
                ("sharedOfaCount", c_uint)]


class c_nvmlComputeInstanceProfileInfo_v2_t(_PrintableStructure):
    _fields_ = [("version", c_uint),
                ("id", c_uint),
                ("sliceCount", c_uint),
                ("instanceCount", c_uint),
                ("multiprocessorCount", c_uint),
                ("sharedCopyEngineCount", c_uint),
                ("sharedDecoderCount", c_uint),
                ("sharedEncoderCount", c_uint),
                ("sharedJpegCount", c_uint),
                ("sharedOfaCount", c_uint),
                ("name", c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE)]

    def __init__(self):
        super().__init__(version=nvmlComputeInstanceProfileInfo_v2)


class c_nvmlComputeInstanceInfo_t(Structure):
    _fields_ = [("device", c_nvmlDevice_t),
                ("gpuInstance", c_nvmlGpuInstance_t),
                ("id", c_uint),
                ("profileId", c_uint),
                ("placement", c_nvmlComputeInstancePlacement_t)]


class c_nvmlDeviceAttributes(Structure):
    _fields_ = [("multiprocessorCount", c_uint),
                ("sharedCopyEngineCount", c_uint),
                ("sharedDecoderCount", c_uint),
                ("sharedEncoderCount", c_uint),
                ("sharedJpegCount", c_uint),
                ("sharedOfaCount", c_uint),
                ("gpuInstanceSliceCount", c_uint),
                ("computeInstanceSliceCount", c_uint),
                ("memorySizeMB", c_ulonglong)]


class c_nvmlVgpuSchedDataWithARR_t(_PrintableStructure):
    _fields_ = [
        ('avgFactor', c_uint),
        ('timeslice', c_uint),
    ]


class c_nvmlVgpuSchedData_t(_PrintableStructure):
    _fields_ = [
        ('timeslice', c_uint),
    ]


class c_nvmlVgpuSchedulerParams_t(Union):
    _fields_ = [
        ('vgpuSchedDataWithARR', c_nvmlVgpuSchedDataWithARR_t),
        ('vgpuSchedData', c_nvmlVgpuSchedData_t),
    ]


class c_nvmlVgpuSchedulerGetState_t(_PrintableStructure):
    _fields_ = [
        ('schedulerPolicy', c_uint),
        ('arrMode', c_uint),
        ('schedulerParams', c_nvmlVgpuSchedulerParams_t),
    ]


class c_nvmlVgpuSchedulerCapabilities_t(_PrintableStructure):
    _fields_ = [
        ('supportedSchedulers', c_uint * NVML_SUPPORTED_VGPU_SCHEDULER_POLICY_COUNT),
        ('maxTimeslice', c_uint),
        ('minTimeslice', c_uint),
        ('isArrModeSupported', c_uint),
        ('maxFrequencyForARR', c_uint),
        ('minFrequencyForARR', c_uint),
        ('maxAvgFactorForARR', c_uint),
        ('minAvgFactorForARR', c_uint),
    ]


# ---------------------------------------------------------------- library state, handles, argument helpers
_refcount = 0
_handle_bufs = {}   # key -> c_uint64 whose address is the handle value
_handle_keys = {}   # address -> key
_CArgObject = type(ctypes.byref(c_uint()))


def _handle(key, ptype):
    buf = _handle_bufs.get(key)
    if buf is None:
        buf = _handle_bufs[key] = ctypes.c_uint64(len(_handle_bufs) + 1)
        _handle_keys[ctypes.addressof(buf)] = key
    return ctypes.cast(c_void_p(ctypes.addressof(buf)), ptype)


def _addr(value):
    if value is None:
        return 0
    return ctypes.cast(value, c_void_p).value or 0


def _key(handle, kinds, what="handle"):
    try:
        key = _handle_keys.get(_addr(handle))
    except (TypeError, ctypes.ArgumentError):
        key = None
    if key is None or key[0] not in kinds:
        raise _err(NVML_ERROR_INVALID_ARGUMENT, "invalid %s" % what)
    return key


def _out(ref, what):
    """The object an out-pointer argument (byref(x) / pointer(x)) points at."""
    if isinstance(ref, _CArgObject):
        return ref._obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    # ctypes would pass a bare c_uint by value; the real library would write through garbage.
    raise _err(NVML_ERROR_INVALID_ARGUMENT, "%s must be byref(...) or pointer(...)" % what)


def _buffer(ref, elem, what):
    """(base address, capacity or None) of a caller-allocated array argument; None for NULL."""
    if ref is None:
        return None
    obj = ref._obj if isinstance(ref, _CArgObject) else ref
    if isinstance(obj, ctypes.Array):
        if sizeof(obj._type_) != sizeof(elem):
            raise _err(NVML_ERROR_INVALID_ARGUMENT, "%s has the wrong element type" % what)
        return ctypes.addressof(obj), len(obj)
    if isinstance(obj, ctypes._Pointer):
        return _addr(obj), None
    if isinstance(obj, ctypes._SimpleCData) or isinstance(obj, Structure):
        if isinstance(ref, _CArgObject) and sizeof(obj) == sizeof(elem):
            return ctypes.addressof(obj), 1
    raise _err(NVML_ERROR_INVALID_ARGUMENT, "%s must be a ctypes array or pointer" % what)


def _struct_arg(ref, cls, what):
    """A `const T *` input argument (byref(s) / pointer(s)); a bare struct is rejected because
    ctypes would pass it by value, which crashes the real library."""
    if isinstance(ref, _CArgObject) and isinstance(ref._obj, cls):
        return ref._obj
    if isinstance(ref, ctypes._Pointer) and isinstance(ref.contents, cls):
        return ref.contents
    raise _err(NVML_ERROR_INVALID_ARGUMENT, "%s must be byref(%s) or pointer(...)" % (what, cls.__name__))


def _int(v):
    return v.value if hasattr(v, "value") else int(v)


def _run(fn, mutate=False, symbol=None):
    """Call ``fn(state)``; ``symbol``: the versioned entry point the real binding looks up first (gpusim/symbols.py),
    FUNCTION_NOT_FOUND when the driver does not export it."""
    if _refcount <= 0:
        raise _err(NVML_ERROR_UNINITIALIZED, "call nvmlInit first")
    try:
        if mutate:
            with _state.transaction() as st:
                _require(st, symbol)
                return fn(st)
        st = _state.load()
        _require(st, symbol)
        return fn(st)
    except _m.Fault as f:
        raise _err(f.code, f.why) from None
    except _state.StateError as e:
        raise _err(NVML_ERROR_UNKNOWN, str(e)) from None


def _require(st, symbol):
    if symbol is not None and not _symbols.exported(st, symbol):
        raise _err(NVML_ERROR_FUNCTION_NOT_FOUND, "driver %s exports no %s" % (st["driver_version"], symbol))


_reachable = _api.reachable  # rules in gpusim/api.py (Fault, turned into NVMLError by _run)


def _gpu(st, handle, allow_mig=False):
    """(gpu dict, (gi, ci) or None) for a device handle (gpusim/api.py device)."""
    key = _key(handle, ("gpu", "mig") if allow_mig else ("gpu",), "device handle")
    return _api.device(st, key, allow_mig)


def _dev_handle(g):
    return _handle(("gpu", g["uuid"]), c_nvmlDevice_t)


_mig_uuid = _api.mig_uuid


# ---------------------------------------------------------------- init / system
def nvmlInitWithFlags(flags):
    global _refcount  # pylint: disable=global-statement
    del flags  # NO_GPUS etc. change nothing here: an empty "gpus" list initialises fine
    try:
        _api.init_check()
    except _m.Fault as f:
        raise _err(f.code, f.why) from None
    _refcount += 1


def nvmlInit():
    nvmlInitWithFlags(0)


def nvmlShutdown():
    global _refcount  # pylint: disable=global-statement
    if _refcount <= 0:
        raise _err(NVML_ERROR_UNINITIALIZED, "not initialised")
    _refcount -= 1


def nvmlSystemGetDriverVersion():
    return _run(_api.driver_version)


_cuda_version = _api.cuda_version


def nvmlSystemGetCudaDriverVersion():
    return _run(_cuda_version)


def nvmlSystemGetCudaDriverVersion_v2():
    return _run(_cuda_version)


def nvmlSystemGetNVMLVersion():
    return _run(_api.nvml_version)


def nvmlSystemGetDriverBranch():
    def fn(st):
        info = c_nvmlSystemDriverBranchInfo_v1_t(0)
        info.version = SystemDriverBranchInfo_v1
        info.branch = "r%s_00" % st["driver_version"].split(".")[0]
        return info
    return _run(fn)


# ---------------------------------------------------------------- devices
def nvmlDeviceGetCount():
    return _run(_api.device_count)


def nvmlDeviceGetHandleByIndex(index):
    return _run(lambda st: _handle(_api.handle_by_index(st, _int(index)), c_nvmlDevice_t))


def _s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def nvmlDeviceGetHandleByUUID(uuid):
    """nvml.h nvmlDeviceGetHandleByUUID (rule: gpusim/api.py handle_by_uuid, shared with the C library)."""
    def fn(st):
        return _handle(_api.handle_by_uuid(st, _s(uuid)), c_nvmlDevice_t)
    return _run(fn)


_parse_bus = _api.parse_bus


def nvmlDeviceGetHandleByPciBusId(pciBusId):
    return _run(lambda st: _handle(_api.handle_by_pci_bus_id(st, _s(pciBusId)), c_nvmlDevice_t))


def _dev(handle, allow_mig=False):
    return _key(handle, ("gpu", "mig") if allow_mig else ("gpu",), "device handle")


def _reading(rule, handle, *args, allow_mig=False):
    """``rule(st, device key, *args)`` of gpusim/api_health.py (the rules this stand-in shares with libnvml)."""
    return _run(lambda st: rule(st, _dev(handle, allow_mig), *(_int(a) for a in args)))


def nvmlDeviceGetIndex(handle):
    return _reading(_ah.index, handle)


def nvmlDeviceGetName(handle):
    return _run(lambda st: _api.name(st, _key(handle, ("gpu", "mig"), "device handle")))


def nvmlDeviceGetUUID(handle):
    return _run(lambda st: _api.uuid(st, _key(handle, ("gpu", "mig"), "device handle")))


def nvmlDeviceGetSerial(handle):
    return _reading(_ah.serial, handle)


def nvmlDeviceGetMinorNumber(handle):
    return _reading(_ah.minor_number, handle)


def nvmlDeviceGetBrand(handle):
    return _reading(_ah.brand, handle)


def nvmlDeviceGetArchitecture(device):
    return _reading(_ah.architecture, device, allow_mig=True)


def nvmlDeviceGetCudaComputeCapability(handle):
    return _reading(_ah.cuda_compute_capability, handle, allow_mig=True)


def nvmlDeviceGetPersistenceMode(handle):
    return _reading(_ah.persistence_mode, handle)


def _fill_pci(g, info):
    for field, value in _api.pci_info(g).items():
        if field != "busIdLegacy" or hasattr(info, field):
            setattr(info, field, value)
    return info


def nvmlDeviceGetPciInfo_v3(handle):
    return _run(lambda st: _fill_pci(_gpu(st, handle)[0], nvmlPciInfo_t()))


def nvmlDeviceGetPciInfo(handle):
    return nvmlDeviceGetPciInfo_v3(handle)


def nvmlDeviceGetPciInfoExt(handle, c_info):
    def fn(st):
        info = _struct_arg(c_info, nvmlPciInfoExt_v1_t, "c_info")
        if info.version != nvmlPciInfoExt_v1:
            raise _err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "set c_info.version = nvmlPciInfoExt_v1")
        _fill_pci(_gpu(st, handle)[0], info)
        info.baseClass = 0x3   # display controller
        info.subClass = 0x2    # 3D controller (data-centre GPUs)
    return _run(fn)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    def fn(st):
        total, used = _api.memory(st, _key(handle, ("gpu", "mig"), "device handle"))
        if not version:
            return c_nvmlMemory_t(total=total, free=total - used, used=used)
        _api.memory_v2_check(version)
        return c_nvmlMemory_v2_t(version=version, total=total, reserved=0, free=total - used, used=used)
    return _run(fn, symbol="nvmlDeviceGetMemoryInfo_v2" if version else None)


def _process_list(st, handle, kind):
    """(pid, usedGpuMemory, gpuInstanceId, computeInstanceId) records (gpusim/api_health.py process_list)."""
    return _ah.process_list(st, _dev(handle, allow_mig=True), kind)


def _processes(handle, kind, symbol):
    def fn(st):
        # nvidia-ml-py turns NVML_VALUE_NOT_AVAILABLE memory into None ("special case for WDDM on Windows").
        return [nvmlFriendlyObject({
            "pid": pid, "usedGpuMemory": None if used == NVML_VALUE_NOT_AVAILABLE_ulonglong.value else used,
            "gpuInstanceId": gi, "computeInstanceId": ci,
        }) for pid, used, gi, ci in _process_list(st, handle, kind)]
    return _run(fn, symbol=symbol)


def throwOnVersionMismatch(func):
    """nvidia-ml-py 13.615.71: a FUNCTION_NOT_FOUND from the wrapped call becomes NVMLLibraryMismatchError."""
    @wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except NVMLError_FunctionNotFound:  # noqa: F821 pylint: disable=undefined-variable
            raise NVMLLibraryMismatchError("Unversioned function called and the "
                                           "pyNVML version does not match the NVML lib version. "
                                           "Either use matching pyNVML and NVML lib versions or "
                                           "use a versioned function such as " + func.__name__ + "_v2") from None
    return wrapper


def nvmlDeviceGetComputeRunningProcesses_v2(handle):
    return _processes(handle, "compute", "nvmlDeviceGetComputeRunningProcesses_v2")


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    return _processes(handle, "compute", "nvmlDeviceGetComputeRunningProcesses_v3")


@throwOnVersionMismatch
def nvmlDeviceGetComputeRunningProcesses(handle):
    return nvmlDeviceGetComputeRunningProcesses_v3(handle)


def nvmlDeviceGetGraphicsRunningProcesses_v2(handle):
    return _processes(handle, "graphics", "nvmlDeviceGetGraphicsRunningProcesses_v2")


def nvmlDeviceGetGraphicsRunningProcesses_v3(handle):
    return _processes(handle, "graphics", "nvmlDeviceGetGraphicsRunningProcesses_v3")


@throwOnVersionMismatch
def nvmlDeviceGetGraphicsRunningProcesses(handle):
    return nvmlDeviceGetGraphicsRunningProcesses_v3(handle)


def nvmlDeviceGetMPSComputeRunningProcesses_v2(handle):
    return _processes(handle, "mps", "nvmlDeviceGetMPSComputeRunningProcesses_v2")


def nvmlDeviceGetMPSComputeRunningProcesses_v3(handle):
    return _processes(handle, "mps", "nvmlDeviceGetMPSComputeRunningProcesses_v3")


@throwOnVersionMismatch
def nvmlDeviceGetMPSComputeRunningProcesses(handle):
    return nvmlDeviceGetMPSComputeRunningProcesses_v3(handle)


# ---------------------------------------------------------------- the library's own symbols (C calling convention)
# nvidia-ml-py wraps no unversioned v1 process list and no v1 placements call; NVIDIA's tools call those symbols
# directly on drivers without the newer ones. _nvmlGetFunctionPointer hands them out as the C functions they are:
# arguments as ctypes pass them, an nvmlReturn_t back.
class _ProcessInfoV1(Structure):  # nvml.h nvmlProcessInfo_v1_t
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong)]


def _c_process_list(kind):
    def call(handle, count_ref, infos):
        try:
            def fn(st):
                procs = _process_list(st, handle, kind)
                count = _out(count_ref, "infoCount")
                buf = _buffer(infos, _ProcessInfoV1, "infos")
                if not procs:
                    count.value = 0
                    return NVML_SUCCESS
                if buf is None or (buf[1] is not None and buf[1] < len(procs)) or count.value < len(procs):
                    count.value = len(procs)
                    return NVML_ERROR_INSUFFICIENT_SIZE
                for i, (pid, used, _gi, _ci) in enumerate(procs):
                    rec = _ProcessInfoV1.from_address(buf[0] + i * sizeof(_ProcessInfoV1))
                    rec.pid, rec.usedGpuMemory = pid, used
                count.value = len(procs)
                return NVML_SUCCESS
            return _run(fn)
        except NVMLError as e:
            return e.value
    return call


def _c_placements(device, profile_id, placements, count_ref):
    try:
        _placements_v1(device, profile_id, placements, count_ref)
        return NVML_SUCCESS
    except NVMLError as e:
        return e.value


_C_SYMBOLS = {"nvmlDeviceGetComputeRunningProcesses": _c_process_list("compute"),
              "nvmlDeviceGetGraphicsRunningProcesses": _c_process_list("graphics"),
              "nvmlDeviceGetMPSComputeRunningProcesses": _c_process_list("mps"),
              "nvmlDeviceGetGpuInstancePossiblePlacements": _c_placements}


def _nvmlGetFunctionPointer(name):
    """nvidia-ml-py's symbol lookup: the C function, or NVMLError_FunctionNotFound when the driver lacks it
    (gpusim/symbols.py). Only the symbols in _C_SYMBOLS are served as C functions here."""
    if _refcount <= 0:
        raise _err(NVML_ERROR_UNINITIALIZED, "NVML library not loaded")
    _require(_state.load(), name)
    if name not in _C_SYMBOLS:
        raise _err(NVML_ERROR_FUNCTION_NOT_FOUND, "gpusim serves %s through its Python function only" % name)
    return _C_SYMBOLS[name]


# ---------------------------------------------------------------- virtualization / licensing (gpusim/api_health.py)
def nvmlDeviceGetVirtualizationMode(handle):
    return _reading(_ah.virtualization_mode, handle)


def nvmlDeviceGetHostVgpuMode(handle):
    return _reading(_ah.host_vgpu_mode, handle)


def nvmlDeviceGetGridLicensableFeatures_v4(handle):
    def fn(st):
        lic = _ah.grid_licensable_features(st, _dev(handle))
        out = c_nvmlGridLicensableFeatures_v4_t()
        out.isGridLicenseSupported = lic["isGridLicenseSupported"]
        out.licensableFeaturesCount = len(lic["features"])
        for f, feature in zip(out.gridLicensableFeatures, lic["features"]):
            for field, value in feature.items():
                if field != "licenseExpiry":
                    setattr(f, field, value)
            for field, value in feature["licenseExpiry"].items():
                setattr(f.licenseExpiry, field, value)
        return out
    return _run(fn)


def nvmlDeviceGetGridLicensableFeatures(handle):
    return nvmlDeviceGetGridLicensableFeatures_v4(handle)


def nvmlDeviceGetVgpuSchedulerState(handle):
    def fn(st):
        policy, arr, timeslice, avg = _ah.vgpu_scheduler_state(st, _dev(handle))
        out = c_nvmlVgpuSchedulerGetState_t()
        out.schedulerPolicy, out.arrMode = policy, arr
        if arr == NVML_VGPU_SCHEDULER_ARR_DISABLE:
            out.schedulerParams.vgpuSchedData.timeslice = timeslice
        else:
            out.schedulerParams.vgpuSchedDataWithARR.avgFactor = avg
            out.schedulerParams.vgpuSchedDataWithARR.timeslice = timeslice
        return out
    return _run(fn)


def nvmlDeviceGetVgpuSchedulerCapabilities(handle):
    def fn(st):
        caps = _ah.vgpu_scheduler_capabilities(st, _dev(handle))
        out = c_nvmlVgpuSchedulerCapabilities_t()
        for i, pid in enumerate(caps.pop("supportedSchedulers")):
            out.supportedSchedulers[i] = pid
        for field, value in caps.items():
            setattr(out, field, value)
        return out
    return _run(fn)


# ---------------------------------------------------------------- MIG mode
def nvmlDeviceGetMigMode(device):
    return _run(lambda st: _api.mig_mode(st, _key(device, ("gpu",), "device handle")))


def nvmlDeviceSetMigMode(device, mode):
    return _run(lambda st: _api.set_mig_mode(st, _key(device, ("gpu",), "device handle"), _int(mode)), mutate=True)


# ---------------------------------------------------------------- GPU instances (rules: gpusim/api_mig.py)
_PTYPES = {"gpu": c_nvmlDevice_t, "mig": c_nvmlDevice_t, "gi": c_nvmlGpuInstance_t, "ci": c_nvmlComputeInstance_t}


def _hd(key):
    """The ctypes handle of a gpusim handle key (api_mig.py answers keys)."""
    return _handle(key, _PTYPES[key[0]])


def _dev_key(device, allow_mig=False):
    return _key(device, ("gpu", "mig") if allow_mig else ("gpu",), "device handle")


def _gi_key(gpuInstance):
    return _key(gpuInstance, ("gi",), "GPU instance handle")


def _ci_key(computeInstance):
    return _key(computeInstance, ("ci",), "compute instance handle")


def _fill(c_struct, fields):
    for name, _type in c_struct._fields_:
        if name != "version":
            setattr(c_struct, name, fields[name])
    return c_struct


def nvmlDeviceGetGpuInstanceProfileInfo(device, profile, version=2):
    if version not in (1, 2):
        raise _err(NVML_ERROR_FUNCTION_NOT_FOUND, "version must be 1 or 2")

    def fn(st):
        fields = _api_mig.gi_profile_info(st, _dev_key(device), _int(profile))
        return _fill(c_nvmlGpuInstanceProfileInfo_v2_t() if version == 2 else c_nvmlGpuInstanceProfileInfo_t(), fields)
    return _run(fn, symbol="nvmlDeviceGetGpuInstanceProfileInfoV" if version == 2 else None)


def nvmlDeviceGetGpuInstanceProfileInfoById(device, profileId):
    return _run(lambda st: _fill(c_nvmlGpuInstanceProfileInfo_v2_t(),
                                 _api_mig.gi_profile_info_by_id(st, _dev_key(device), _int(profileId))))


nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo
nvmlDeviceGetGpuInstanceProfileInfoByIdV = nvmlDeviceGetGpuInstanceProfileInfoById


def nvmlDeviceGetGpuInstanceRemainingCapacity(device, profileId):
    return _run(lambda st: _api_mig.gi_remaining_capacity(st, _dev_key(device), _int(profileId)))


def _write_placements(ref, count_ref, items, cls):
    count = _out(count_ref, "countRef")
    buf = _buffer(ref, cls, "placementsRef")
    if buf is not None:
        base, cap = buf
        if cap is not None and cap < len(items):
            count.value = len(items)
            raise _err(NVML_ERROR_INSUFFICIENT_SIZE, "placement array holds %d, need %d" % (cap, len(items)))
        for i, (start, size) in enumerate(items):
            p = cls.from_address(base + i * sizeof(cls))
            p.start, p.size = start, size
    count.value = len(items)
    return NVML_SUCCESS


def _placements(device, profileId, placementsRef, countRef, symbol):
    def fn(st):
        items = _api_mig.gi_possible_placements(st, _dev_key(device), _int(profileId))
        return _write_placements(placementsRef, countRef, items, c_nvmlGpuInstancePlacement_t)
    return _run(fn, symbol=symbol)


def nvmlDeviceGetGpuInstancePossiblePlacements(device, profileId, placementsRef, countRef):
    # nvidia-ml-py 13.615.71 calls the _v2 symbol (470.42.01 and newer).
    return _placements(device, profileId, placementsRef, countRef, "nvmlDeviceGetGpuInstancePossiblePlacements_v2")


def _placements_v1(device, profileId, placementsRef, countRef):
    """The driver's original symbol, which the binding does not wrap (served as a C function, _C_SYMBOLS)."""
    return _placements(device, profileId, placementsRef, countRef, None)


def nvmlDeviceCreateGpuInstance(device, profileId):
    return _run(lambda st: _hd(_api_mig.create_gi(st, _dev_key(device), _int(profileId))), mutate=True)


def nvmlDeviceCreateGpuInstanceWithPlacement(device, profileId, placement):
    def fn(st):
        key = _dev_key(device)
        _api_mig.gpu(st, key)  # a gone GPU before a bad placement argument, as before the move
        p = _struct_arg(placement, c_nvmlGpuInstancePlacement_t, "placement")
        return _hd(_api_mig.create_gi(st, key, _int(profileId), (p.start, p.size)))
    return _run(fn, mutate=True)


def nvmlGpuInstanceDestroy(gpuInstance):
    def fn(st):
        _api_mig.destroy_gi(st, _gi_key(gpuInstance))
        return NVML_SUCCESS
    return _run(fn, mutate=True)


def _write_handles(ref, count_ref, handles, what):
    count = _out(count_ref, "countRef")
    buf = _buffer(ref, c_void_p, what)
    if buf is None:
        raise _err(NVML_ERROR_INVALID_ARGUMENT, "%s must not be NULL" % what)
    base, cap = buf
    if cap is not None and cap < len(handles):
        raise _err(NVML_ERROR_INSUFFICIENT_SIZE, "%s holds %d, need %d" % (what, cap, len(handles)))
    for i, h in enumerate(handles):
        c_void_p.from_address(base + i * sizeof(c_void_p)).value = _addr(h)
    count.value = len(handles)
    return NVML_SUCCESS


def nvmlDeviceGetGpuInstances(device, profileId, gpuInstancesRef, countRef):
    def fn(st):
        hs = [_hd(k) for k in _api_mig.gpu_instances(st, _dev_key(device), _int(profileId))]
        return _write_handles(gpuInstancesRef, countRef, hs, "gpuInstancesRef")
    return _run(fn)


def nvmlDeviceGetGpuInstanceById(device, gpuInstanceId):
    return _run(lambda st: _hd(_api_mig.gpu_instance_by_id(st, _dev_key(device), _int(gpuInstanceId))))


def nvmlGpuInstanceGetInfo(gpuInstance):
    def fn(st):
        fields = _api_mig.gi_info(st, _gi_key(gpuInstance))
        info = c_nvmlGpuInstanceInfo_t()
        info.device = _hd(fields["device"])
        info.id = fields["id"]
        info.profileId = fields["profileId"]
        info.placement = c_nvmlGpuInstancePlacement_t(*fields["placement"])
        return info
    return _run(fn)


# ---------------------------------------------------------------- compute instances (rules: gpusim/api_mig.py)
def nvmlGpuInstanceGetComputeInstanceProfileInfo(device, profile, engProfile, version=2):
    if version not in (1, 2):
        raise _err(NVML_ERROR_FUNCTION_NOT_FOUND, "version must be 1 or 2")

    def fn(st):
        fields = _api_mig.ci_profile_info(st, _gi_key(device), _int(profile), _int(engProfile))
        return _fill(c_nvmlComputeInstanceProfileInfo_v2_t() if version == 2 else c_nvmlComputeInstanceProfileInfo_t(),
                     fields)
    return _run(fn, symbol="nvmlGpuInstanceGetComputeInstanceProfileInfoV" if version == 2 else None)


nvmlGpuInstanceGetComputeInstanceProfileInfoV = nvmlGpuInstanceGetComputeInstanceProfileInfo


def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gpuInstance, profileId):
    return _run(lambda st: _api_mig.ci_remaining_capacity(st, _gi_key(gpuInstance), _int(profileId)))


def nvmlGpuInstanceGetComputeInstancePossiblePlacements(gpuInstance, profileId, placementsRef, countRef):
    def fn(st):
        items = _api_mig.ci_possible_placements(st, _gi_key(gpuInstance), _int(profileId))
        return _write_placements(placementsRef, countRef, items, c_nvmlComputeInstancePlacement_t)
    return _run(fn)


def nvmlGpuInstanceCreateComputeInstance(gpuInstance, profileId):
    return _run(lambda st: _hd(_api_mig.create_ci(st, _gi_key(gpuInstance), _int(profileId))), mutate=True)


def nvmlGpuInstanceCreateComputeInstanceWithPlacement(gpuInstance, profileId, placement):
    def fn(st):
        key = _gi_key(gpuInstance)
        _api_mig.gi(st, key)  # a gone GPU instance before a bad placement argument, as before the move
        p = _struct_arg(placement, c_nvmlComputeInstancePlacement_t, "placement")
        return _hd(_api_mig.create_ci(st, key, _int(profileId), (p.start, p.size)))
    return _run(fn, mutate=True)


def nvmlComputeInstanceDestroy(computeInstance):
    def fn(st):
        _api_mig.destroy_ci(st, _ci_key(computeInstance))
        return NVML_SUCCESS
    return _run(fn, mutate=True)


def nvmlGpuInstanceGetComputeInstances(gpuInstance, profileId, computeInstancesRef, countRef):
    def fn(st):
        hs = [_hd(k) for k in _api_mig.compute_instances(st, _gi_key(gpuInstance), _int(profileId))]
        return _write_handles(computeInstancesRef, countRef, hs, "computeInstancesRef")
    return _run(fn)


def nvmlGpuInstanceGetComputeInstanceById(gpuInstance, computeInstanceId):
    return _run(lambda st: _hd(_api_mig.compute_instance_by_id(st, _gi_key(gpuInstance), _int(computeInstanceId))))


def nvmlComputeInstanceGetInfo_v2(computeInstance):
    def fn(st):
        fields = _api_mig.ci_info(st, _ci_key(computeInstance))
        info = c_nvmlComputeInstanceInfo_t()
        info.device = _hd(fields["device"])
        info.gpuInstance = _hd(fields["gpuInstance"])
        info.id = fields["id"]
        info.profileId = fields["profileId"]
        info.placement = c_nvmlComputeInstancePlacement_t(*fields["placement"])
        return info
    return _run(fn, symbol="nvmlComputeInstanceGetInfo_v2")


def nvmlComputeInstanceGetInfo(computeInstance):
    return nvmlComputeInstanceGetInfo_v2(computeInstance)


# ---------------------------------------------------------------- MIG devices (rules: gpusim/api_mig.py)
def nvmlDeviceIsMigDeviceHandle(device):
    # nvidia-ml-py returns the c_uint itself, not its value.
    return _run(lambda st: c_uint(_api_mig.is_mig_device_handle(st, _dev_key(device, allow_mig=True))))


def nvmlDeviceGetGpuInstanceId(device):
    return _run(lambda st: _api_mig.mig_gpu_instance_id(st, _dev_key(device, allow_mig=True)))


def nvmlDeviceGetComputeInstanceId(device):
    return _run(lambda st: _api_mig.mig_compute_instance_id(st, _dev_key(device, allow_mig=True)))


def nvmlDeviceGetMaxMigDeviceCount(device):
    return _run(lambda st: _api_mig.max_mig_device_count(st, _dev_key(device)))


def nvmlDeviceGetMigDeviceHandleByIndex(device, index):
    return _run(lambda st: _hd(_api_mig.mig_device_handle_by_index(st, _dev_key(device), _int(index))))


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice):
    return _run(lambda st: _hd(_api_mig.device_handle_from_mig(st, _dev_key(migDevice, allow_mig=True))))


def nvmlDeviceGetAttributes_v2(device):
    return _run(lambda st: _fill(c_nvmlDeviceAttributes(), _api_mig.attributes(st, _dev_key(device, allow_mig=True))))


def nvmlDeviceGetAttributes(device):
    return nvmlDeviceGetAttributes_v2(device)


# ---------------------------------------------------------------- health readings (rules: gpusim/api_health.py, health.py)
def nvmlDeviceGetEccMode(handle):
    return _reading(_ah.ecc_mode, handle)


def nvmlDeviceGetCurrentEccMode(handle):
    return nvmlDeviceGetEccMode(handle)[0]


def nvmlDeviceGetPendingEccMode(handle):
    return nvmlDeviceGetEccMode(handle)[1]


def nvmlDeviceGetDefaultEccMode(handle):
    # nvidia-ml-py returns a one-element list.
    return [_reading(_ah.default_ecc_mode, handle)]


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    return _reading(_ah.total_ecc_errors, handle, errorType, counterType)


def nvmlDeviceGetRemappedRows(device):
    return _reading(_ah.remapped_rows, device)


def nvmlDeviceGetRetiredPages(device, sourceFilter):
    return [address for address, _t in _reading(_ah.retired_pages, device, sourceFilter)]


def nvmlDeviceGetRetiredPages_v2(device, sourceFilter):
    return [{"address": address, "timestamp": t} for address, t in _reading(_ah.retired_pages, device, sourceFilter)]


def nvmlDeviceGetRetiredPagesPendingStatus(device):
    return _reading(_ah.retired_pages_pending, device)


def _pcie(handle, k):
    return _run(lambda st: _ah.pcie(st, _dev(handle))[k])


def nvmlDeviceGetCurrPcieLinkGeneration(handle):
    return _pcie(handle, 0)


def nvmlDeviceGetCurrPcieLinkWidth(handle):
    return _pcie(handle, 1)


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _pcie(handle, 2)


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _pcie(handle, 3)


def nvmlDeviceGetGpuMaxPcieLinkGeneration(handle):
    return _pcie(handle, 4)


def nvmlDeviceGetTemperature(handle, sensor):
    return _reading(_ah.temperature, handle, sensor)


def nvmlDeviceGetTemperatureV1(handle, sensor):
    return nvmlDeviceGetTemperature(handle, sensor)


def nvmlDeviceGetTemperatureV(handle, sensor, version=nvmlTemperature_v1):
    if version != nvmlTemperature_v1:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return nvmlDeviceGetTemperatureV1(handle, sensor)


def nvmlDeviceGetTemperatureThreshold(handle, threshold):
    return _reading(_ah.temperature_threshold, handle, threshold)


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _reading(_ah.clocks_event_reasons, handle)


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return _reading(_ah.clocks_event_reasons, handle)


def nvmlDeviceGetSupportedClocksEventReasons(handle):
    return _reading(_ah.supported_clocks_event_reasons, handle)


def nvmlDeviceGetSupportedClocksThrottleReasons(handle):
    return _reading(_ah.supported_clocks_event_reasons, handle)
