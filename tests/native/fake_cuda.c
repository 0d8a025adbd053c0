/* A stand-in NVIDIA driver library (soname libcuda.so.1) for machines without one:
 * it loads, so a test process "maps libcuda" as a CUDA job does, and every call says
 * there is no device. Like the real driver, cuInit loads CUDA_INJECTION64_PATH and calls
 * its InitializeInjection() once (how `rlscope-top run` gets its agent into a program).
 * Only the GPU agent's tests use it (with tests/native/fake_cupti.c). */
#include <dlfcn.h>
#include <stdlib.h>

#define CUDA_ERROR_NO_DEVICE 100

int cuInit(unsigned int flags) {
    static int injected;
    (void)flags;
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (path && !injected) {
        injected = 1;
        void *h = dlopen(path, RTLD_NOW);
        int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
        if (init)
            init();
    }
    return CUDA_ERROR_NO_DEVICE;
}

int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = 0; return CUDA_ERROR_NO_DEVICE; }
