/*
 * gpusim's libnvidia-ml.so.1: virtualization mode, a vGPU host's mode and scheduler, and the vGPU software licence
 * (nvml.h "vGPU Management" / "GRID licensing" entry points that the product reads). Rules: gpusim/api_health.py
 * (the licence, the modes) over vgpu_sched.py (the scheduler the loaded RmPVMRL value makes the driver run).
 * Structures are zeroed before filling, so fields gpusim does not model read 0 as in nvidia-ml-py's fresh structs.
 */
#include "gpusim_nvml.h"

#include <string.h>

_Static_assert(NVML_SUPPORTED_VGPU_SCHEDULER_POLICY_COUNT == 3, "capi.py answers three supportedSchedulers");

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *pVirtualMode)
{
    REQUIRE_INIT();
    REQUIRE(pVirtualMode);
    unsigned int v;
    nvmlReturn_t ret = gcall("nvmlDeviceGetVirtualizationMode", "h", "u", device, &v);
    if (ret == NVML_SUCCESS)
        *pVirtualMode = (nvmlGpuVirtualizationMode_t)v;
    return ret;
}

nvmlReturn_t nvmlDeviceGetHostVgpuMode(nvmlDevice_t device, nvmlHostVgpuMode_t *pHostVgpuMode)
{
    REQUIRE_INIT();
    REQUIRE(pHostVgpuMode);
    unsigned int v;
    nvmlReturn_t ret = gcall("nvmlDeviceGetHostVgpuMode", "h", "u", device, &v);
    if (ret == NVML_SUCCESS)
        *pHostVgpuMode = (nvmlHostVgpuMode_t)v;
    return ret;
}

/* nvidia-ml-py's nvmlDeviceGetGridLicensableFeatures (and _v4) call this symbol; gpusim's state has at most one
 * licensable feature (api_health.grid_licensable_features), the header's array holds
 * NVML_GRID_LICENSE_FEATURE_MAX_COUNT. */
nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v4(nvmlDevice_t device,
                                                    nvmlGridLicensableFeatures_t *pGridLicensableFeatures)
{
    REQUIRE_INIT();
    REQUIRE(pGridLicensableFeatures);
    nvmlGridLicensableFeatures_t out;
    memset(&out, 0, sizeof(out));
    nvmlGridLicensableFeature_t *f = &out.gridLicensableFeatures[0];
    unsigned int supported, count, code, year, month, day, hour, min, sec, status;
    nvmlReturn_t ret = gcall("nvmlDeviceGetGridLicensableFeatures_v4", "h", "uuuuSSuuuuuuuu", device, &supported,
                             &count, &code, &f->featureState, f->licenseInfo, (unsigned int)sizeof(f->licenseInfo),
                             f->productName, (unsigned int)sizeof(f->productName), &f->featureEnabled, &year, &month,
                             &day, &hour, &min, &sec, &status);
    if (ret != NVML_SUCCESS)
        return ret;
    out.isGridLicenseSupported = (int)supported;
    out.licensableFeaturesCount = count;
    f->featureCode = (nvmlGridLicenseFeatureCode_t)code;
    f->licenseExpiry.year = year;
    f->licenseExpiry.month = (unsigned short)month;
    f->licenseExpiry.day = (unsigned short)day;
    f->licenseExpiry.hour = (unsigned short)hour;
    f->licenseExpiry.min = (unsigned short)min;
    f->licenseExpiry.sec = (unsigned short)sec;
    f->licenseExpiry.status = (unsigned char)status;
    if (!count)
        memset(f, 0, sizeof(*f));
    *pGridLicensableFeatures = out;
    return ret;
}

/* nvmlVgpuSchedulerGetState_t's schedulerParams is a union: with ARR disabled the driver fills vgpuSchedData
 * {timeslice}, otherwise vgpuSchedDataWithARR {avgFactor, timeslice} (the slice sits at another offset). */
nvmlReturn_t nvmlDeviceGetVgpuSchedulerState(nvmlDevice_t device, nvmlVgpuSchedulerGetState_t *pSchedulerState)
{
    REQUIRE_INIT();
    REQUIRE(pSchedulerState);
    nvmlVgpuSchedulerGetState_t out;
    memset(&out, 0, sizeof(out));
    unsigned int timeslice, avg;
    nvmlReturn_t ret = gcall("nvmlDeviceGetVgpuSchedulerState", "h", "uuuu", device, &out.schedulerPolicy,
                             &out.arrMode, &timeslice, &avg);
    if (ret != NVML_SUCCESS)
        return ret;
    if (out.arrMode == NVML_VGPU_SCHEDULER_ARR_DISABLE) {
        out.schedulerParams.vgpuSchedData.timeslice = timeslice;
    } else {
        out.schedulerParams.vgpuSchedDataWithARR.avgFactor = avg;
        out.schedulerParams.vgpuSchedDataWithARR.timeslice = timeslice;
    }
    *pSchedulerState = out;
    return ret;
}

nvmlReturn_t nvmlDeviceGetVgpuSchedulerCapabilities(nvmlDevice_t device, nvmlVgpuSchedulerCapabilities_t *pCapabilities)
{
    REQUIRE_INIT();
    REQUIRE(pCapabilities);
    nvmlVgpuSchedulerCapabilities_t c;
    memset(&c, 0, sizeof(c));
    nvmlReturn_t ret = gcall("nvmlDeviceGetVgpuSchedulerCapabilities", "h", "uuuuuuuuuu", device,
                             &c.supportedSchedulers[0], &c.supportedSchedulers[1], &c.supportedSchedulers[2],
                             &c.maxTimeslice, &c.minTimeslice, &c.isArrModeSupported, &c.maxFrequencyForARR,
                             &c.minFrequencyForARR, &c.maxAvgFactorForARR, &c.minAvgFactorForARR);
    if (ret == NVML_SUCCESS)
        *pCapabilities = c;
    return ret;
}
