/*
 * gpusim's libnvidia-ml.so.1: NVML's C entry points, answered by gpusim's Python rules (lab/gpusim/gpusim/capi.py)
 * on the JSON machine state named by GPUSIM_STATE. Design: DESIGN.md beside this file.
 *
 * Names, types and return codes come from NVIDIA's nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h at the pin in go.mod,
 * fetched by build.py from the Go module proxy): the header is included, so a definition here that differs from
 * NVIDIA's declaration does not compile. Which of these symbols a build exports is decided per driver branch by a
 * linker version script that build.py writes from gpusim/symbols.py.
 *
 * CPython is reached through dlsym, never linked: in a Python process (nvidia-ml-py loads this library with ctypes,
 * which releases the GIL around the call) the running interpreter's symbols are global and are used with
 * PyGILState_Ensure; in any other process (mig-parted and the device plugin through go-nvml's dlopen) the library
 * dlopens libpython (GPUSIM_LIBPYTHON, else the one build.py found) and starts an interpreter of its own. Only
 * stable-ABI functions are used, so one build serves Python 3.12 and 3.13 hosts.
 */
#define _GNU_SOURCE
#include "gpusim_nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef GPUSIM_DEFAULT_HOME
#define GPUSIM_DEFAULT_HOME ""
#endif
#ifndef GPUSIM_DEFAULT_LIBPYTHON
#define GPUSIM_DEFAULT_LIBPYTHON ""
#endif

/* ---------------------------------------------------------------- CPython, by dlsym (stable ABI only) */
typedef struct _object PyObject;
static struct {
    int (*IsInitialized)(void);
    void (*InitializeEx)(int);
    int (*GILState_Ensure)(void);
    void (*GILState_Release)(int);
    void *(*Eval_SaveThread)(void);
    PyObject *(*CompileString)(const char *, const char *, int);
    PyObject *(*Import_ExecCodeModule)(const char *, PyObject *);
    PyObject *(*Object_GetAttrString)(PyObject *, const char *);
    PyObject *(*Object_CallObject)(PyObject *, PyObject *);
    PyObject *(*Tuple_New)(long);
    int (*Tuple_SetItem)(PyObject *, long, PyObject *);
    long (*Tuple_Size)(PyObject *);
    PyObject *(*Tuple_GetItem)(PyObject *, long);
    long (*List_Size)(PyObject *);
    PyObject *(*List_GetItem)(PyObject *, long);
    PyObject *(*Long_FromUnsignedLongLong)(unsigned long long);
    unsigned long long (*Long_AsUnsignedLongLongMask)(PyObject *);
    PyObject *(*Unicode_FromString)(const char *);
    const char *(*Unicode_AsUTF8AndSize)(PyObject *, long *);
    void (*DecRef)(PyObject *);
    PyObject *(*Err_Occurred)(void);
    void (*Err_Print)(void);
} py;

#define PY_FILE_INPUT 257 /* Python.h Py_file_input */

static pthread_once_t bridge_once = PTHREAD_ONCE_INIT;
static int bridge_ok;
static PyObject *capi_call; /* gpusim.capi.call */

/* Loads the gpusim package by path (GPUSIM_HOME, else the checkout this library was built from) without touching
 * sys.path, so a host process's own `import pynvml` keeps resolving to nvidia-ml-py; reuses an imported gpusim. */
static const char BOOTSTRAP[] =
    "import importlib.util, os, sys\n"
    "def start(default_home):\n"
    "    if 'gpusim' not in sys.modules:\n"
    "        home = os.environ.get('GPUSIM_HOME') or default_home\n"
    "        pkg = os.path.join(home, 'gpusim')\n"
    "        spec = importlib.util.spec_from_file_location('gpusim', os.path.join(pkg, '__init__.py'),\n"
    "                                                      submodule_search_locations=[pkg])\n"
    "        mod = importlib.util.module_from_spec(spec)\n"
    "        sys.modules['gpusim'] = mod\n"
    "        try:\n"
    "            spec.loader.exec_module(mod)\n"
    "        except BaseException:\n"
    "            del sys.modules['gpusim']\n"
    "            raise\n"
    "    import gpusim.capi\n"
    "    return gpusim.capi.call\n";

static void *sym(void *lib, const char *name, int *missing)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "gpusim libnvidia-ml: no %s in libpython\n", name);
        *missing = 1;
    }
    return p;
}

static int resolve(void *lib)
{
    int missing = 0;
#define R(field, name) *(void **)&py.field = sym(lib, name, &missing)
    R(IsInitialized, "Py_IsInitialized");
    R(InitializeEx, "Py_InitializeEx");
    R(GILState_Ensure, "PyGILState_Ensure");
    R(GILState_Release, "PyGILState_Release");
    R(Eval_SaveThread, "PyEval_SaveThread");
    R(CompileString, "Py_CompileString");
    R(Import_ExecCodeModule, "PyImport_ExecCodeModule");
    R(Object_GetAttrString, "PyObject_GetAttrString");
    R(Object_CallObject, "PyObject_CallObject");
    R(Tuple_New, "PyTuple_New");
    R(Tuple_SetItem, "PyTuple_SetItem");
    R(Tuple_Size, "PyTuple_Size");
    R(Tuple_GetItem, "PyTuple_GetItem");
    R(List_Size, "PyList_Size");
    R(List_GetItem, "PyList_GetItem");
    R(Long_FromUnsignedLongLong, "PyLong_FromUnsignedLongLong");
    R(Long_AsUnsignedLongLongMask, "PyLong_AsUnsignedLongLongMask");
    R(Unicode_FromString, "PyUnicode_FromString");
    R(Unicode_AsUTF8AndSize, "PyUnicode_AsUTF8AndSize");
    R(DecRef, "Py_DecRef");
    R(Err_Occurred, "PyErr_Occurred");
    R(Err_Print, "PyErr_Print");
#undef R
    return !missing;
}

static void bridge_start(void)
{
    void *lib = RTLD_DEFAULT;
    int (*host_initialized)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    if (!host_initialized || !host_initialized()) {
        /* Not a Python process: an interpreter of our own (RTLD_GLOBAL: extension modules such as _json and fcntl
         * resolve libpython's symbols globally). */
        const char *path = getenv("GPUSIM_LIBPYTHON");
        if (!path || !*path)
            path = GPUSIM_DEFAULT_LIBPYTHON;
        lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (!lib) {
            fprintf(stderr, "gpusim libnvidia-ml: cannot load libpython %s: %s (set GPUSIM_LIBPYTHON)\n", path,
                    dlerror());
            return;
        }
    }
    if (!resolve(lib))
        return;
    if (!py.IsInitialized()) {
        py.InitializeEx(0); /* 0: no signal handlers; the host (Go) owns them */
        py.Eval_SaveThread(); /* release the GIL; every call takes it with PyGILState_Ensure */
    }
    int gil = py.GILState_Ensure();
    PyObject *code = py.CompileString(BOOTSTRAP, "<gpusim libnvidia-ml bootstrap>", PY_FILE_INPUT);
    PyObject *mod = code ? py.Import_ExecCodeModule("_gpusim_libnvml", code) : NULL;
    PyObject *start = mod ? py.Object_GetAttrString(mod, "start") : NULL;
    PyObject *args = start ? py.Tuple_New(1) : NULL;
    if (args)
        py.Tuple_SetItem(args, 0, py.Unicode_FromString(GPUSIM_DEFAULT_HOME));
    capi_call = args ? py.Object_CallObject(start, args) : NULL;
    if (!capi_call) {
        fprintf(stderr, "gpusim libnvidia-ml: cannot load gpusim (GPUSIM_HOME=%s, default %s):\n",
                getenv("GPUSIM_HOME") ? getenv("GPUSIM_HOME") : "", GPUSIM_DEFAULT_HOME);
        if (py.Err_Occurred())
            py.Err_Print();
    } else {
        bridge_ok = 1;
    }
    if (args)
        py.DecRef(args);
    if (start)
        py.DecRef(start);
    if (mod)
        py.DecRef(mod);
    if (code)
        py.DecRef(code);
    py.GILState_Release(gil);
}

/* ---------------------------------------------------------------- handles
 * One handle per key for the life of the process, as NVML hands out the same nvmlDevice_t for a device every time.
 * Keys are gpusim's (capi.py), e.g. ["gpu", "GPU-..."]; a pointer that is not one of ours is INVALID_ARGUMENT. */
struct gs_handle {
    struct gs_handle *next;
    char key[];
};
static struct gs_handle *handles;
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;

void *intern(const char *key)
{
    pthread_mutex_lock(&handles_lock);
    struct gs_handle *h;
    for (h = handles; h; h = h->next)
        if (!strcmp(h->key, key))
            break;
    if (!h && (h = malloc(sizeof(*h) + strlen(key) + 1))) {
        strcpy(h->key, key);
        h->next = handles;
        handles = h;
    }
    pthread_mutex_unlock(&handles_lock);
    return h;
}

const char *handle_key(const void *p)
{
    const char *key = NULL;
    pthread_mutex_lock(&handles_lock);
    for (struct gs_handle *h = handles; h; h = h->next)
        if ((const void *)h == p) {
            key = h->key;
            break;
        }
    pthread_mutex_unlock(&handles_lock);
    return key;
}

/* ---------------------------------------------------------------- one call into gpusim.capi.call (gpusim_nvml.h) */
static int refcount;
static pthread_mutex_t refcount_lock = PTHREAD_MUTEX_INITIALIZER;

nvmlReturn_t gcall(const char *name, const char *in, const char *out, ...)
{
    va_list ap;
    pthread_once(&bridge_once, bridge_start);
    if (!bridge_ok)
        return NVML_ERROR_UNKNOWN;
    va_start(ap, out);
    nvmlReturn_t ret = NVML_ERROR_UNKNOWN;
    int gil = py.GILState_Ensure();
    PyObject *args = py.Tuple_New((long)strlen(in) + 1), *res = NULL;
    py.Tuple_SetItem(args, 0, py.Unicode_FromString(name));
    for (long i = 0; in[i]; i++) {
        PyObject *v = NULL;
        if (in[i] == 'u') {
            v = py.Long_FromUnsignedLongLong(va_arg(ap, unsigned int));
        } else if (in[i] == 'h') {
            const char *key = handle_key(va_arg(ap, void *));
            if (!key) {
                ret = NVML_ERROR_INVALID_ARGUMENT;
                goto done;
            }
            v = py.Unicode_FromString(key);
        } else if (in[i] == 's') {
            v = py.Unicode_FromString(va_arg(ap, const char *));
        }
        if (!v)
            goto done;
        py.Tuple_SetItem(args, i + 1, v);
    }
    res = py.Object_CallObject(capi_call, args);
    if (!res || py.Tuple_Size(res) < 1)
        goto done;
    ret = (nvmlReturn_t)py.Long_AsUnsignedLongLongMask(py.Tuple_GetItem(res, 0));
    if (ret != NVML_SUCCESS)
        goto done;
    if (py.Tuple_Size(res) != (long)strlen(out) + 1) {
        fprintf(stderr, "gpusim libnvidia-ml: %s answered %ld values, expected %zu\n", name, py.Tuple_Size(res) - 1,
                strlen(out));
        ret = NVML_ERROR_UNKNOWN;
        goto done;
    }
    for (long i = 0; out[i]; i++) {
        PyObject *v = py.Tuple_GetItem(res, i + 1);
        if (out[i] == 'u') {
            *va_arg(ap, unsigned int *) = (unsigned int)py.Long_AsUnsignedLongLongMask(v);
        } else if (out[i] == 'U') {
            *va_arg(ap, unsigned long long *) = py.Long_AsUnsignedLongLongMask(v);
        } else if (out[i] == 'S') {
            char *buf = va_arg(ap, char *);
            unsigned int length = va_arg(ap, unsigned int);
            long n = 0;
            const char *s = py.Unicode_AsUTF8AndSize(v, &n);
            if (!s)
                goto done_unknown;
            if ((unsigned long)n + 1 > length) {
                ret = NVML_ERROR_INSUFFICIENT_SIZE;
                goto done;
            }
            memcpy(buf, s, (size_t)n + 1);
        } else if (out[i] == 'L') {
            unsigned long long *buf = va_arg(ap, unsigned long long *);
            unsigned int cap = va_arg(ap, unsigned int);
            unsigned int *n = va_arg(ap, unsigned int *);
            long len = py.Tuple_Size(v);
            if (len < 0)
                goto done_unknown;
            *n = (unsigned int)len;
            if ((unsigned long)len > cap) {
                ret = NVML_ERROR_INSUFFICIENT_SIZE;
                goto done;
            }
            for (long j = 0; j < len; j++)
                buf[j] = py.Long_AsUnsignedLongLongMask(py.Tuple_GetItem(v, j));
        } else if (out[i] == 'H') {
            const char *s = py.Unicode_AsUTF8AndSize(v, NULL);
            void *h = s ? intern(s) : NULL;
            if (!h)
                goto done_unknown;
            *va_arg(ap, void **) = h;
        } else if (out[i] == 'K' || out[i] == 'P') {
            /* A list: of handle keys into a caller's handle array ('K'), or of [start, size] into a caller's
             * placement array ('P', two unsigned ints each as nvml.h's placement structs; NULL: count only). */
            void *arr = va_arg(ap, void *);
            unsigned int *count = va_arg(ap, unsigned int *);
            long n = py.List_Size(v);
            if (n < 0)
                goto done_unknown;
            for (long j = 0; arr && j < n; j++) {
                PyObject *item = py.List_GetItem(v, j);
                if (out[i] == 'K') {
                    const char *s = item ? py.Unicode_AsUTF8AndSize(item, NULL) : NULL;
                    void *h = s ? intern(s) : NULL;
                    if (!h)
                        goto done_unknown;
                    ((void **)arr)[j] = h;
                } else {
                    if (!item || py.List_Size(item) != 2)
                        goto done_unknown;
                    ((unsigned int *)arr)[2 * j] = (unsigned int)py.Long_AsUnsignedLongLongMask(py.List_GetItem(item, 0));
                    ((unsigned int *)arr)[2 * j + 1] =
                        (unsigned int)py.Long_AsUnsignedLongLongMask(py.List_GetItem(item, 1));
                }
            }
            *count = (unsigned int)n;
        } else {
            (void)va_arg(ap, void *);
        }
    }
    goto done;
done_unknown:
    ret = NVML_ERROR_UNKNOWN;
done:
    if (py.Err_Occurred()) {
        fprintf(stderr, "gpusim libnvidia-ml: %s raised:\n", name);
        py.Err_Print();
        ret = NVML_ERROR_UNKNOWN;
    }
    if (res)
        py.DecRef(res);
    py.DecRef(args);
    py.GILState_Release(gil);
    va_end(ap);
    return ret;
}

int initialized(void)
{
    pthread_mutex_lock(&refcount_lock);
    int n = refcount;
    pthread_mutex_unlock(&refcount_lock);
    return n > 0;
}


/* ---------------------------------------------------------------- init / system */
nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t ret = gcall("nvmlInitWithFlags", "u", "", flags);
    if (ret == NVML_SUCCESS) {
        pthread_mutex_lock(&refcount_lock);
        refcount++;
        pthread_mutex_unlock(&refcount_lock);
    }
    return ret;
}

nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

/* nvml.h nvmlShutdown: NVML_ERROR_UNINITIALIZED "if the library has not been successfully initialized". */
nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&refcount_lock);
    if (refcount > 0)
        refcount--;
    else
        ret = NVML_ERROR_UNINITIALIZED;
    pthread_mutex_unlock(&refcount_lock);
    return ret;
}

/* The texts are gpusim's table (api.ERROR_STRINGS); each is kept for the life of the process (a const char *). */
const char *nvmlErrorString(nvmlReturn_t result)
{
    static struct es {
        struct es *next;
        nvmlReturn_t code;
        char text[128];
    } *cache;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    struct es *e;
    pthread_mutex_lock(&lock);
    for (e = cache; e && e->code != result; e = e->next)
        ;
    pthread_mutex_unlock(&lock);
    if (e)
        return e->text;
    if (!(e = calloc(1, sizeof(*e))))
        return "Unknown Error";
    e->code = result;
    if (gcall("nvmlErrorString", "u", "S", (unsigned int)result, e->text, (unsigned int)sizeof(e->text)) !=
        NVML_SUCCESS)
        strcpy(e->text, "Unknown Error");
    pthread_mutex_lock(&lock);
    e->next = cache;
    cache = e;
    pthread_mutex_unlock(&lock);
    return e->text;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    REQUIRE_INIT();
    REQUIRE(version);
    return gcall("nvmlSystemGetDriverVersion", "", "S", version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    REQUIRE_INIT();
    REQUIRE(version);
    return gcall("nvmlSystemGetNVMLVersion", "", "S", version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    REQUIRE_INIT();
    REQUIRE(cudaDriverVersion);
    return gcall("nvmlSystemGetCudaDriverVersion", "", "u", (unsigned int *)cudaDriverVersion);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---------------------------------------------------------------- devices */
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    REQUIRE_INIT();
    REQUIRE(deviceCount);
    return gcall("nvmlDeviceGetCount_v2", "", "u", deviceCount);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    REQUIRE_INIT();
    REQUIRE(device);
    return gcall("nvmlDeviceGetHandleByIndex_v2", "u", "H", index, (void **)device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    REQUIRE_INIT();
    REQUIRE(pciBusId && device);
    return gcall("nvmlDeviceGetHandleByPciBusId_v2", "s", "H", pciBusId, (void **)device);
}

/* A GPU's or a MIG device's UUID (nvml.h: "The UUID of the target GPU or MIG instance"); the device plugin's health
 * checks look each device up by it (internal/rm/health.go). */
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    REQUIRE_INIT();
    REQUIRE(uuid && device);
    return gcall("nvmlDeviceGetHandleByUUID", "s", "H", uuid, (void **)device);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    REQUIRE_INIT();
    REQUIRE(name);
    return gcall("nvmlDeviceGetName", "h", "S", device, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    REQUIRE_INIT();
    REQUIRE(uuid);
    return gcall("nvmlDeviceGetUUID", "h", "S", device, uuid, length);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    REQUIRE_INIT();
    REQUIRE(pci);
    nvmlPciInfo_t info;
    memset(&info, 0, sizeof(info));
    nvmlReturn_t ret = gcall("nvmlDeviceGetPciInfo_v3", "h", "SuuuuuS", device, info.busIdLegacy,
                             (unsigned int)sizeof(info.busIdLegacy), &info.domain, &info.bus, &info.device,
                             &info.pciDeviceId, &info.pciSubSystemId, info.busId, (unsigned int)sizeof(info.busId));
    if (ret == NVML_SUCCESS)
        *pci = info;
    return ret;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    REQUIRE_INIT();
    REQUIRE(memory);
    nvmlMemory_t m;
    nvmlReturn_t ret = gcall("nvmlDeviceGetMemoryInfo", "h", "UUU", device, &m.total, &m.free, &m.used);
    if (ret == NVML_SUCCESS)
        *memory = m;
    return ret;
}

/* The caller sets memory->version = nvmlMemory_v2 (nvml.h); gpusim checks it (api.memory_v2_check). */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    REQUIRE_INIT();
    REQUIRE(memory);
    nvmlMemory_v2_t m = {.version = memory->version};
    nvmlReturn_t ret = gcall("nvmlDeviceGetMemoryInfo_v2", "hu", "UUUU", device, memory->version, &m.total,
                             &m.reserved, &m.free, &m.used);
    if (ret == NVML_SUCCESS)
        *memory = m;
    return ret;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    REQUIRE_INIT();
    REQUIRE(currentMode && pendingMode);
    unsigned int cur, pend;
    nvmlReturn_t ret = gcall("nvmlDeviceGetMigMode", "h", "uu", device, &cur, &pend);
    if (ret == NVML_SUCCESS) {
        *currentMode = cur;
        *pendingMode = pend;
    }
    return ret;
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus)
{
    REQUIRE_INIT();
    REQUIRE(activationStatus);
    unsigned int status;
    nvmlReturn_t ret = gcall("nvmlDeviceSetMigMode", "hu", "u", device, mode, &status);
    if (ret == NVML_SUCCESS)
        *activationStatus = (nvmlReturn_t)status;
    return ret;
}
