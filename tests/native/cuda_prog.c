/* A CUDA program that is not Python, for `rlscope-top run` (tests/test_gpu_ebpf.py): it
 * links the stand-in driver (libcuda.so.1), waits for a go file, initialises the driver,
 * and makes N kernels through the stand-in libcupti, as a GPU would; then it exits.
 * Usage: cuda_prog FAKE_CUPTI N GO_FILE */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int cuInit(unsigned int flags);

int main(int argc, char **argv) {
    if (argc < 4)
        return 2;
    void *cupti = dlopen(argv[1], RTLD_NOW);
    void (*kernels)(unsigned, unsigned long, unsigned) = cupti ? dlsym(cupti, "fake_cupti_kernels") : NULL;
    if (!kernels)
        return 3;
    printf("ready %d\n", getpid());
    fflush(stdout);
    while (access(argv[3], F_OK) != 0)
        usleep(10000);
    cuInit(0);                       /* the driver loads CUDA_INJECTION64_PATH here */
    kernels((unsigned)atoi(argv[2]), 100000, 3);
    printf("made %s kernels\n", argv[2]);
    return 0;
}
