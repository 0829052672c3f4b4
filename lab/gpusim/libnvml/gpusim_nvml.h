/*
 * What the entry-point files of gpusim's libnvidia-ml.so.1 share (libnvml.c defines it): the call into gpusim's
 * Python rules and the per-process rules of nvml.h. Hidden: the build's version script exports only nvml* names.
 * One file per NVML area (libnvml.c: init, system, devices; mig.c: GPU and compute instances; ...), so each area's
 * entry points sit beside each other.
 */
#ifndef GPUSIM_NVML_H
#define GPUSIM_NVML_H
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include "nvml.h"

#define GPUSIM_HIDDEN __attribute__((visibility("hidden")))

/* One call into gpusim.capi.call(name, inputs...) -> (code, outputs...).
 * in: 'u' unsigned int, 'h' handle (INVALID_ARGUMENT when not ours), 's' const char *.
 * out (after the return code, in capi's order): 'u' unsigned int *, 'U' unsigned long long *,
 * 'S' char *buf + unsigned int length (INSUFFICIENT_SIZE when the text and its NUL do not fit, nvml.h),
 * 'H' void ** (a handle), 'L' unsigned long long *buf + unsigned int capacity + unsigned int *count (a tuple of
 * integers: *count = its length always, INSUFFICIENT_SIZE when more than capacity; buf may be NULL for capacity 0),
 * 'K' void **array + unsigned int *count (a list of handles; the array must hold them all,
 * as nvml.h says of nvmlDeviceGetGpuInstances), 'P' unsigned int *pairs + unsigned int *count (a list of
 * [start, size], as nvmlGpuInstancePlacement_t / nvmlComputeInstancePlacement_t; NULL pairs: only the count),
 * '-' skip. NULL out pointers are the caller's to refuse beforehand. */
GPUSIM_HIDDEN nvmlReturn_t gcall(const char *name, const char *in, const char *out, ...);
/* The one handle of a gpusim key (capi.py's JSON text), and the key of a handle (NULL: not ours). */
GPUSIM_HIDDEN void *intern(const char *key);
GPUSIM_HIDDEN const char *handle_key(const void *p);
/* Whether nvmlInit has succeeded more often than nvmlShutdown. */
GPUSIM_HIDDEN int initialized(void);

#define REQUIRE_INIT()                                                                                                \
    do {                                                                                                              \
        if (!initialized())                                                                                           \
            return NVML_ERROR_UNINITIALIZED;                                                                          \
    } while (0)
#define REQUIRE(ptr)                                                                                                  \
    do {                                                                                                              \
        if (!(ptr))                                                                                                   \
            return NVML_ERROR_INVALID_ARGUMENT;                                                                       \
    } while (0)

#endif
