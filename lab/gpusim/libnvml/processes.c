/*
 * gpusim's libnvidia-ml.so.1: the process lists (nvmlDevice{Compute,Graphics,MPSCompute}RunningProcesses in nvml.h's
 * three generations). Which of them a driver branch exports is gpusim/symbols.py's (535.98: no _v3); the records
 * come from gpusim/api_health.py process_list through capi.py.
 *
 * nvml.h (nvmlDeviceGetComputeRunningProcesses_v3): "To query the current number of running compute processes,
 * call this function with *infoCount = 0. The return code will be NVML_ERROR_INSUFFICIENT_SIZE, or NVML_SUCCESS if
 * none are running. For this call infos is allowed to be NULL"; INSUFFICIENT_SIZE "if infoCount indicates that the
 * infos array is too small; infoCount will contain minimal amount of space necessary". nvidia-ml-py's wrappers rely
 * on exactly that (a sizing call with (0, NULL), then one with count * 2 + 5 records).
 */
#include "gpusim_nvml.h"

#include <stdlib.h>

#define VALUES_PER_RECORD 4 /* api_health.process_list: pid, usedGpuMemory, gpuInstanceId, computeInstanceId */
#define MAX_RECORDS (1u << 20) /* larger capacities are clamped: no GPU holds that many contexts */

/* v1: nvmlProcessInfo_v1_t records (the original symbols); otherwise nvmlProcessInfo_v2_t (= nvmlProcessInfo_t). */
static nvmlReturn_t process_list(const char *name, nvmlDevice_t device, unsigned int *infoCount, void *infos, int v1)
{
    REQUIRE_INIT();
    REQUIRE(infoCount);
    unsigned int cap = infos ? (*infoCount < MAX_RECORDS ? *infoCount : MAX_RECORDS) : 0, n = 0;
    unsigned long long *vals = NULL;
    if (cap && !(vals = calloc((size_t)cap * VALUES_PER_RECORD, sizeof(*vals))))
        return NVML_ERROR_MEMORY;
    nvmlReturn_t ret = gcall(name, "h", "L", device, vals, cap * VALUES_PER_RECORD, &n);
    if (ret == NVML_SUCCESS || ret == NVML_ERROR_INSUFFICIENT_SIZE) {
        unsigned int count = n / VALUES_PER_RECORD;
        *infoCount = count;
        for (unsigned int i = 0; ret == NVML_SUCCESS && i < count; i++) {
            const unsigned long long *r = vals + (size_t)i * VALUES_PER_RECORD;
            if (v1) {
                nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
                p->pid = (unsigned int)r[0];
                p->usedGpuMemory = r[1];
            } else {
                nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)infos + i;
                p->pid = (unsigned int)r[0];
                p->usedGpuMemory = r[1];
                p->gpuInstanceId = (unsigned int)r[2];
                p->computeInstanceId = (unsigned int)r[3];
            }
        }
    }
    free(vals);
    return ret;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    return process_list("nvmlDeviceGetComputeRunningProcesses", device, infoCount, infos, 1);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    return process_list("nvmlDeviceGetComputeRunningProcesses_v2", device, infoCount, infos, 0);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return process_list("nvmlDeviceGetComputeRunningProcesses_v3", device, infoCount, infos, 0);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos)
{
    return process_list("nvmlDeviceGetGraphicsRunningProcesses", device, infoCount, infos, 1);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos)
{
    return process_list("nvmlDeviceGetGraphicsRunningProcesses_v2", device, infoCount, infos, 0);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    return process_list("nvmlDeviceGetGraphicsRunningProcesses_v3", device, infoCount, infos, 0);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v1_t *infos)
{
    return process_list("nvmlDeviceGetMPSComputeRunningProcesses", device, infoCount, infos, 1);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_v2_t *infos)
{
    return process_list("nvmlDeviceGetMPSComputeRunningProcesses_v2", device, infoCount, infos, 0);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos)
{
    return process_list("nvmlDeviceGetMPSComputeRunningProcesses_v3", device, infoCount, infos, 0);
}
