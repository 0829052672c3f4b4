/*
 * gpusim's libnvidia-ml.so.1: the readings of a health gate and a preflight (ECC, row remapping, page retirement,
 * PCIe link, temperature, clock event reasons, persistence) and the cheap identity queries beside them (index,
 * serial, minor number, brand, architecture, CUDA compute capability). Rules: gpusim/api_health.py over health.py;
 * the signatures are nvml.h's, so the out types (nvmlEnableState_t, int, unsigned long long) are the header's.
 * Out values are written only on success, as NVML leaves the caller's variables alone on an error.
 */
#include "gpusim_nvml.h"

#include <stdlib.h>

/* One unsigned int out value of the entry point `name` for a device. */
static nvmlReturn_t device_uint(const char *name, nvmlDevice_t device, unsigned int *out)
{
    REQUIRE_INIT();
    REQUIRE(out);
    unsigned int v;
    nvmlReturn_t ret = gcall(name, "h", "u", device, &v);
    if (ret == NVML_SUCCESS)
        *out = v;
    return ret;
}

static nvmlReturn_t device_ull(const char *name, nvmlDevice_t device, unsigned long long *out)
{
    REQUIRE_INIT();
    REQUIRE(out);
    unsigned long long v;
    nvmlReturn_t ret = gcall(name, "h", "U", device, &v);
    if (ret == NVML_SUCCESS)
        *out = v;
    return ret;
}

/* ---------------------------------------------------------------- identity */
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    return device_uint("nvmlDeviceGetIndex", device, index);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    REQUIRE_INIT();
    REQUIRE(serial);
    return gcall("nvmlDeviceGetSerial", "h", "S", device, serial, length);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    return device_uint("nvmlDeviceGetMinorNumber", device, minorNumber);
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    unsigned int v = 0;
    nvmlReturn_t ret = device_uint("nvmlDeviceGetBrand", device, type ? &v : NULL);
    if (ret == NVML_SUCCESS)
        *type = (nvmlBrandType_t)v;
    return ret;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    return device_uint("nvmlDeviceGetArchitecture", device, arch);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    REQUIRE_INIT();
    REQUIRE(major && minor);
    unsigned int ma, mi;
    nvmlReturn_t ret = gcall("nvmlDeviceGetCudaComputeCapability", "h", "uu", device, &ma, &mi);
    if (ret == NVML_SUCCESS) {
        *major = (int)ma;
        *minor = (int)mi;
    }
    return ret;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    unsigned int v = 0;
    nvmlReturn_t ret = device_uint("nvmlDeviceGetPersistenceMode", device, mode ? &v : NULL);
    if (ret == NVML_SUCCESS)
        *mode = (nvmlEnableState_t)v;
    return ret;
}

/* ---------------------------------------------------------------- ECC */
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    REQUIRE_INIT();
    REQUIRE(current && pending);
    unsigned int cur, pend;
    nvmlReturn_t ret = gcall("nvmlDeviceGetEccMode", "h", "uu", device, &cur, &pend);
    if (ret == NVML_SUCCESS) {
        *current = (nvmlEnableState_t)cur;
        *pending = (nvmlEnableState_t)pend;
    }
    return ret;
}

nvmlReturn_t nvmlDeviceGetDefaultEccMode(nvmlDevice_t device, nvmlEnableState_t *defaultMode)
{
    unsigned int v = 0;
    nvmlReturn_t ret = device_uint("nvmlDeviceGetDefaultEccMode", device, defaultMode ? &v : NULL);
    if (ret == NVML_SUCCESS)
        *defaultMode = (nvmlEnableState_t)v;
    return ret;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    REQUIRE_INIT();
    REQUIRE(eccCounts);
    unsigned long long v;
    nvmlReturn_t ret = gcall("nvmlDeviceGetTotalEccErrors", "huu", "U", device, (unsigned int)errorType,
                             (unsigned int)counterType, &v);
    if (ret == NVML_SUCCESS)
        *eccCounts = v;
    return ret;
}

/* ---------------------------------------------------------------- row remapping / page retirement */
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred)
{
    REQUIRE_INIT();
    REQUIRE(corrRows && uncRows && isPending && failureOccurred);
    unsigned int c, u, p, f;
    nvmlReturn_t ret = gcall("nvmlDeviceGetRemappedRows", "h", "uuuu", device, &c, &u, &p, &f);
    if (ret == NVML_SUCCESS) {
        *corrRows = c;
        *uncRows = u;
        *isPending = p;
        *failureOccurred = f;
    }
    return ret;
}

/* nvml.h nvmlDeviceGetRetiredPages[_v2]: pageCount "Set to 0 to query the size without allocating an addresses
 * buffer"; INSUFFICIENT_SIZE with *pageCount "set to the needed size". Records: (address, timestamp). */
static nvmlReturn_t retired_pages(const char *name, nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                  unsigned int *pageCount, unsigned long long *addresses,
                                  unsigned long long *timestamps)
{
    REQUIRE_INIT();
    REQUIRE(pageCount);
    unsigned int cap = addresses ? (*pageCount < (1u << 20) ? *pageCount : (1u << 20)) : 0, n = 0;
    unsigned long long *vals = NULL;
    if (cap && !(vals = calloc((size_t)cap * 2, sizeof(*vals))))
        return NVML_ERROR_MEMORY;
    nvmlReturn_t ret = gcall(name, "hu", "L", device, (unsigned int)cause, vals, cap * 2, &n);
    if (ret == NVML_SUCCESS || ret == NVML_ERROR_INSUFFICIENT_SIZE) {
        *pageCount = n / 2;
        for (unsigned int i = 0; ret == NVML_SUCCESS && i < n / 2; i++) {
            addresses[i] = vals[2 * i];
            if (timestamps)
                timestamps[i] = vals[2 * i + 1];
        }
    }
    free(vals);
    return ret;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *pageCount,
                                       unsigned long long *addresses)
{
    return retired_pages("nvmlDeviceGetRetiredPages", device, cause, pageCount, addresses, NULL);
}

nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                          unsigned int *pageCount, unsigned long long *addresses,
                                          unsigned long long *timestamps)
{
    return retired_pages("nvmlDeviceGetRetiredPages_v2", device, cause, pageCount, addresses, timestamps);
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    unsigned int v = 0;
    nvmlReturn_t ret = device_uint("nvmlDeviceGetRetiredPagesPendingStatus", device, isPending ? &v : NULL);
    if (ret == NVML_SUCCESS)
        *isPending = (nvmlEnableState_t)v;
    return ret;
}

/* ---------------------------------------------------------------- PCIe link */
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    return device_uint("nvmlDeviceGetCurrPcieLinkGeneration", device, currLinkGen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    return device_uint("nvmlDeviceGetCurrPcieLinkWidth", device, currLinkWidth);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    return device_uint("nvmlDeviceGetMaxPcieLinkGeneration", device, maxLinkGen);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    return device_uint("nvmlDeviceGetMaxPcieLinkWidth", device, maxLinkWidth);
}

nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGenDevice)
{
    return device_uint("nvmlDeviceGetGpuMaxPcieLinkGeneration", device, maxLinkGenDevice);
}

/* ---------------------------------------------------------------- temperature, clock event reasons */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp)
{
    REQUIRE_INIT();
    REQUIRE(temp);
    unsigned int v;
    nvmlReturn_t ret = gcall("nvmlDeviceGetTemperature", "hu", "u", device, (unsigned int)sensorType, &v);
    if (ret == NVML_SUCCESS)
        *temp = v;
    return ret;
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int *temp)
{
    REQUIRE_INIT();
    REQUIRE(temp);
    unsigned int v;
    nvmlReturn_t ret = gcall("nvmlDeviceGetTemperatureThreshold", "hu", "u", device, (unsigned int)thresholdType, &v);
    if (ret == NVML_SUCCESS)
        *temp = v;
    return ret;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *clocksEventReasons)
{
    return device_ull("nvmlDeviceGetCurrentClocksEventReasons", device, clocksEventReasons);
}

/* The deprecated name of the same reading (nvml.h keeps both; same bits). */
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *clocksThrottleReasons)
{
    return device_ull("nvmlDeviceGetCurrentClocksThrottleReasons", device, clocksThrottleReasons);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device,
                                                      unsigned long long *supportedClocksEventReasons)
{
    return device_ull("nvmlDeviceGetSupportedClocksEventReasons", device, supportedClocksEventReasons);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device,
                                                         unsigned long long *supportedClocksThrottleReasons)
{
    return device_ull("nvmlDeviceGetSupportedClocksThrottleReasons", device, supportedClocksThrottleReasons);
}
