/*
 * gpusim's libnvidia-ml.so.1: event sets (nvml.h "Event Handling Methods"), what NVIDIA's k8s-device-plugin health
 * checker calls (internal/rm/health.go checkHealth: nvmlEventSetCreate, nvmlDeviceGetSupportedEventTypes,
 * nvmlDeviceRegisterEvents, nvmlEventSetWait_v2 with a 5000 ms timeout in a loop, nvmlEventSetFree).
 * Rules: gpusim/api_events.py (an event set is a cursor over the state's Xid events and ECC error counts; the wait
 * polls the state). An event set's handle is an interned key (["eventset", n]) like a device's, so a foreign or
 * freed set is INVALID_ARGUMENT. nvml.h: "Operations on set are not thread safe"; the library's handle table and
 * the interpreter's lock keep concurrent calls safe anyway. Out values are written only on success.
 */
#include "gpusim_nvml.h"

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    REQUIRE_INIT();
    REQUIRE(set);
    void *h;
    nvmlReturn_t ret = gcall("nvmlEventSetCreate", "", "H", &h);
    if (ret == NVML_SUCCESS)
        *set = (nvmlEventSet_t)h;
    return ret;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    REQUIRE_INIT();
    REQUIRE(eventTypes);
    unsigned long long v;
    nvmlReturn_t ret = gcall("nvmlDeviceGetSupportedEventTypes", "h", "U", device, &v);
    if (ret == NVML_SUCCESS)
        *eventTypes = v;
    return ret;
}

/* nvml.h: INVALID_ARGUMENT "if eventTypes is invalid or set is NULL". The mask crosses the bridge as two halves. */
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    REQUIRE_INIT();
    REQUIRE(set);
    return gcall("nvmlDeviceRegisterEvents", "huuh", "", device, (unsigned int)(eventTypes >> 32),
                 (unsigned int)(eventTypes & 0xFFFFFFFFu), (void *)set);
}

/* nvml.h: NVML_ERROR_TIMEOUT "if no event arrived in specified timeout"; the wait runs in gpusim with the
 * interpreter's lock released while it sleeps (time.sleep), so other threads' calls go on meanwhile. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    REQUIRE_INIT();
    REQUIRE(data);
    nvmlEventData_t e;
    void *dev;
    nvmlReturn_t ret = gcall("nvmlEventSetWait_v2", "hu", "HUUuu", (void *)set, timeoutms, &dev, &e.eventType,
                             &e.eventData, &e.gpuInstanceId, &e.computeInstanceId);
    if (ret == NVML_SUCCESS) {
        e.device = (nvmlDevice_t)dev;
        *data = e;
    }
    return ret;
}

/* The original symbol (nvml.h declares it among the deprecated ones, same signature). */
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    REQUIRE_INIT();
    return gcall("nvmlEventSetFree", "h", "", (void *)set);
}
