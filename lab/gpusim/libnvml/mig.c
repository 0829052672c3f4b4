/*
 * gpusim's libnvidia-ml.so.1: GPU instances, compute instances and MIG device handles (nvml.h "Multi Instance GPU
 * Management", nvmlMultiInstanceGPU). Every answer is gpusim's (gpusim/capi.py -> gpusim/api_mig.py -> machine.py);
 * this file keeps nvml.h's per-process rules: UNINITIALIZED before nvmlInit, INVALID_ARGUMENT for NULL pointers
 * (each function's @return list), struct versions of the ...V entry points, and the struct layouts themselves.
 *
 * Callers: nvidia-ml-py (the product's plugins/module_utils/_gpu/nvml.py: profiles, placements, instances, create and
 * destroy, infos; the V and _v2 symbols) and go-nvml v0.12.4-0 under mig-parted (the v1 names
 * nvmlDeviceGetGpuInstanceProfileInfo, nvmlGpuInstanceGetComputeInstanceProfileInfo, nvmlDeviceGetGpuInstances,
 * nvmlDeviceCreateGpuInstance, nvmlGpuInstanceCreateComputeInstance, the destroys; pkg/nvml/lib.go
 * updateVersionedSymbols picks nvmlComputeInstanceGetInfo_v2 and nvmlDeviceGetGpuInstancePossiblePlacements_v2 where
 * the library has them).
 */
#include "gpusim_nvml.h"

#include <string.h>

/* ---------------------------------------------------------------- GPU instance profiles */
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info)
{
    REQUIRE_INIT();
    REQUIRE(info);
    nvmlGpuInstanceProfileInfo_t p;
    memset(&p, 0, sizeof(p));
    nvmlReturn_t ret = gcall("nvmlDeviceGetGpuInstanceProfileInfo", "hu", "uuuuuuuuuuU", device, profile, &p.id,
                             &p.isP2pSupported, &p.sliceCount, &p.instanceCount, &p.multiprocessorCount,
                             &p.copyEngineCount, &p.decoderCount, &p.encoderCount, &p.jpegCount, &p.ofaCount,
                             &p.memorySizeMB);
    if (ret == NVML_SUCCESS)
        *info = p;
    return ret;
}

/* The caller sets info->version = nvmlGpuInstanceProfileInfo_v2 (nvml.h); gpusim checks it (api_mig.version_check). */
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    REQUIRE_INIT();
    REQUIRE(info);
    nvmlGpuInstanceProfileInfo_v2_t p;
    memset(&p, 0, sizeof(p));
    p.version = info->version;
    nvmlReturn_t ret = gcall("nvmlDeviceGetGpuInstanceProfileInfoV", "huu", "uuuuuuuuuuUS", device, profile,
                             info->version, &p.id, &p.isP2pSupported, &p.sliceCount, &p.instanceCount,
                             &p.multiprocessorCount, &p.copyEngineCount, &p.decoderCount, &p.encoderCount,
                             &p.jpegCount, &p.ofaCount, &p.memorySizeMB, p.name, (unsigned int)sizeof(p.name));
    if (ret == NVML_SUCCESS)
        *info = p;
    return ret;
}

/* nvml.h: "placements ... Can be NULL to discover number of allowed placements for this profile. If non-NULL must be
 * large enough to accommodate the placements supported by the profile"; count is only an output. */
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t *placements, unsigned int *count)
{
    REQUIRE_INIT();
    REQUIRE(count);
    return gcall("nvmlDeviceGetGpuInstancePossiblePlacements_v2", "hu", "P", device, profileId,
                 (unsigned int *)placements, count);
}

/* The original symbol (no _v2), which go-nvml calls on drivers without the _v2 one: the same answer. */
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t *placements, unsigned int *count)
{
    REQUIRE_INIT();
    REQUIRE(count);
    return gcall("nvmlDeviceGetGpuInstancePossiblePlacements", "hu", "P", device, profileId,
                 (unsigned int *)placements, count);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int *count)
{
    REQUIRE_INIT();
    REQUIRE(count);
    return gcall("nvmlDeviceGetGpuInstanceRemainingCapacity", "hu", "u", device, profileId, count);
}

/* ---------------------------------------------------------------- GPU instances */
nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstance)
{
    REQUIRE_INIT();
    REQUIRE(gpuInstance);
    return gcall("nvmlDeviceCreateGpuInstance", "hu", "H", device, profileId, (void **)gpuInstance);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *gpuInstance)
{
    REQUIRE_INIT();
    REQUIRE(placement && gpuInstance);
    return gcall("nvmlDeviceCreateGpuInstanceWithPlacement", "huuu", "H", device, profileId, placement->start,
                 placement->size, (void **)gpuInstance);
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    REQUIRE_INIT();
    return gcall("nvmlGpuInstanceDestroy", "h", "", gpuInstance);
}

/* nvml.h: gpuInstances "must be large enough to accommodate the instances supported by the profile"
 * (instanceCount of its profile info); count is only an output. */
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstances,
                                       unsigned int *count)
{
    REQUIRE_INIT();
    REQUIRE(gpuInstances && count);
    return gcall("nvmlDeviceGetGpuInstances", "hu", "K", device, profileId, (void *)gpuInstances, count);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance)
{
    REQUIRE_INIT();
    REQUIRE(gpuInstance);
    return gcall("nvmlDeviceGetGpuInstanceById", "hu", "H", device, id, (void **)gpuInstance);
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    REQUIRE_INIT();
    REQUIRE(info);
    nvmlGpuInstanceInfo_t i;
    memset(&i, 0, sizeof(i));
    nvmlReturn_t ret = gcall("nvmlGpuInstanceGetInfo", "h", "Huuuu", gpuInstance, (void **)&i.device, &i.id,
                             &i.profileId, &i.placement.start, &i.placement.size);
    if (ret == NVML_SUCCESS)
        *info = i;
    return ret;
}

/* ---------------------------------------------------------------- compute instance profiles */
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info)
{
    REQUIRE_INIT();
    REQUIRE(info);
    nvmlComputeInstanceProfileInfo_t p;
    memset(&p, 0, sizeof(p));
    nvmlReturn_t ret = gcall("nvmlGpuInstanceGetComputeInstanceProfileInfo", "huu", "uuuuuuuuu", gpuInstance, profile,
                             engProfile, &p.id, &p.sliceCount, &p.instanceCount, &p.multiprocessorCount,
                             &p.sharedCopyEngineCount, &p.sharedDecoderCount, &p.sharedEncoderCount,
                             &p.sharedJpegCount, &p.sharedOfaCount);
    if (ret == NVML_SUCCESS)
        *info = p;
    return ret;
}

/* The caller sets info->version = nvmlComputeInstanceProfileInfo_v2 (nvml.h); gpusim checks it. */
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info)
{
    REQUIRE_INIT();
    REQUIRE(info);
    nvmlComputeInstanceProfileInfo_v2_t p;
    memset(&p, 0, sizeof(p));
    p.version = info->version;
    nvmlReturn_t ret = gcall("nvmlGpuInstanceGetComputeInstanceProfileInfoV", "huuu", "uuuuuuuuuS", gpuInstance,
                             profile, engProfile, info->version, &p.id, &p.sliceCount, &p.instanceCount,
                             &p.multiprocessorCount, &p.sharedCopyEngineCount, &p.sharedDecoderCount,
                             &p.sharedEncoderCount, &p.sharedJpegCount, &p.sharedOfaCount, p.name,
                             (unsigned int)sizeof(p.name));
    if (ret == NVML_SUCCESS)
        *info = p;
    return ret;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                                unsigned int *count)
{
    REQUIRE_INIT();
    REQUIRE(count);
    return gcall("nvmlGpuInstanceGetComputeInstanceRemainingCapacity", "hu", "u", gpuInstance, profileId, count);
}

/* As nvmlDeviceGetGpuInstancePossiblePlacements_v2: NULL placements asks for the count only. */
nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                                 nvmlComputeInstancePlacement_t *placements,
                                                                 unsigned int *count)
{
    REQUIRE_INIT();
    REQUIRE(count);
    return gcall("nvmlGpuInstanceGetComputeInstancePossiblePlacements", "hu", "P", gpuInstance, profileId,
                 (unsigned int *)placements, count);
}

/* ---------------------------------------------------------------- compute instances */
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t *computeInstance)
{
    REQUIRE_INIT();
    REQUIRE(computeInstance);
    return gcall("nvmlGpuInstanceCreateComputeInstance", "hu", "H", gpuInstance, profileId, (void **)computeInstance);
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                               const nvmlComputeInstancePlacement_t *placement,
                                                               nvmlComputeInstance_t *computeInstance)
{
    REQUIRE_INIT();
    REQUIRE(placement && computeInstance);
    return gcall("nvmlGpuInstanceCreateComputeInstanceWithPlacement", "huuu", "H", gpuInstance, profileId,
                 placement->start, placement->size, (void **)computeInstance);
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    REQUIRE_INIT();
    return gcall("nvmlComputeInstanceDestroy", "h", "", computeInstance);
}

/* As nvmlDeviceGetGpuInstances: the array holds instanceCount of the CI profile; count is only an output. */
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t *computeInstances, unsigned int *count)
{
    REQUIRE_INIT();
    REQUIRE(computeInstances && count);
    return gcall("nvmlGpuInstanceGetComputeInstances", "hu", "K", gpuInstance, profileId, (void *)computeInstances,
                 count);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance)
{
    REQUIRE_INIT();
    REQUIRE(computeInstance);
    return gcall("nvmlGpuInstanceGetComputeInstanceById", "hu", "H", gpuInstance, id, (void **)computeInstance);
}

static nvmlReturn_t ci_info(const char *name, nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    REQUIRE_INIT();
    REQUIRE(info);
    nvmlComputeInstanceInfo_t i;
    memset(&i, 0, sizeof(i));
    nvmlReturn_t ret = gcall(name, "h", "HHuuuu", computeInstance, (void **)&i.device, (void **)&i.gpuInstance, &i.id,
                             &i.profileId, &i.placement.start, &i.placement.size);
    if (ret == NVML_SUCCESS)
        *info = i;
    return ret;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    return ci_info("nvmlComputeInstanceGetInfo_v2", computeInstance, info);
}

/* The pre-455.38 symbol; nvml.h declares it with the same struct. */
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    return ci_info("nvmlComputeInstanceGetInfo", computeInstance, info);
}

/* ---------------------------------------------------------------- MIG device handles */
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    REQUIRE_INIT();
    REQUIRE(isMigDevice);
    return gcall("nvmlDeviceIsMigDeviceHandle", "h", "u", device, isMigDevice);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    REQUIRE_INIT();
    REQUIRE(id);
    return gcall("nvmlDeviceGetGpuInstanceId", "h", "u", device, id);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    REQUIRE_INIT();
    REQUIRE(id);
    return gcall("nvmlDeviceGetComputeInstanceId", "h", "u", device, id);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    REQUIRE_INIT();
    REQUIRE(count);
    return gcall("nvmlDeviceGetMaxMigDeviceCount", "h", "u", device, count);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
    REQUIRE_INIT();
    REQUIRE(migDevice);
    return gcall("nvmlDeviceGetMigDeviceHandleByIndex", "hu", "H", device, index, (void **)migDevice);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    REQUIRE_INIT();
    REQUIRE(device);
    return gcall("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "h", "H", migDevice, (void **)device);
}

static nvmlReturn_t device_attributes(const char *name, nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    REQUIRE_INIT();
    REQUIRE(attributes);
    nvmlDeviceAttributes_t a;
    memset(&a, 0, sizeof(a));
    nvmlReturn_t ret = gcall(name, "h", "uuuuuuuuU", device, &a.multiprocessorCount, &a.sharedCopyEngineCount,
                             &a.sharedDecoderCount, &a.sharedEncoderCount, &a.sharedJpegCount, &a.sharedOfaCount,
                             &a.gpuInstanceSliceCount, &a.computeInstanceSliceCount, &a.memorySizeMB);
    if (ret == NVML_SUCCESS)
        *attributes = a;
    return ret;
}

/* nvml.h: "This API currently only supports MIG device handles" (NOT_SUPPORTED otherwise, api_mig.attributes). */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return device_attributes("nvmlDeviceGetAttributes_v2", device, attributes);
}

nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return device_attributes("nvmlDeviceGetAttributes", device, attributes);
}
