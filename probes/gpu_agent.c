/* rlscope-top's GPU agent: CUPTI activity in the target, no Python, no per-record work
 * beyond a walk that interns kernel names (docs/gpu-agent.md).
 *
 * Ways in (one library for all of them):
 *   - `rlscope-top run`: CUDA_INJECTION64_PATH makes the CUDA driver load it at cuInit
 *     and call InitializeInjection(); RLSCOPE_GPU_AUTOSTART=1 starts tracing there, so
 *     nothing launched before the monitor maps the region is missed.
 *   - listen mode (RLSCOPE_GPU_ACTIVITY=1, enable_gpu_activity()): loaded, idle.
 *   - `attach PID --gpu-activity`: injected into the running process (ptrace + dlopen).
 *
 * The constructor maps a memfd region (gpu_agent.h) and starts one control thread that
 * sleeps on a futex in it. The monitor writes a command and wakes it: START loads
 * libcupti (the path the monitor chose), enables kernel/memcpy/memset activity and
 * registers the buffer callbacks; STOP disables and flushes; FLUSH flushes. Completed
 * CUPTI buffers are copied whole into the region's ring; the monitor decodes them.
 * libcupti is never linked: it is loaded with dlopen, so the agent loads in any process.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <cupti_result.h>
#include <cupti_version.h>

#include "gpu_agent.h"

#define EXPORT __attribute__((visibility("default")))
#define BUF_BYTES (2u << 20)          /* one CUPTI activity buffer */
#define POOL_PREALLOC 8               /* allocated at the first start (kineto issue 1020) */
#define POOL_MAX 64                   /* at most this many; beyond, CUPTI drops and counts */
#define NAME_SLOTS (1u << 14)         /* interned kernel-name pointers */
#define NAME_MAX_BYTES 1024
#define FLUSH_PERIOD_MS 250
#define HEARTBEAT_GRACE_NS 10000000000ull   /* no monitor tick this long: stop tracing */
#define EXIT_DRAIN_NS 3000000000ull         /* at exit, wait this long at most for the monitor to drain, */
#define EXIT_CLAIM_NS 1000000000ull         /* and this long for one to appear */
#define EXIT_LOCK_S 2                       /* at exit, wait this long at most for a command in flight */
#define LAUNCH_CLAIM_NS 10000000000ull      /* `run`'s own child waits this long in cuInit for the monitor */

_Static_assert(sizeof(struct rls_frame) == 16, "frame header");
_Static_assert(sizeof(struct rls_name) == 16, "name header");
_Static_assert(offsetof(struct rls_gpu_header, cupti_path) == 600, "header layout");
_Static_assert(sizeof(struct rls_gpu_header) <= RLS_GPU_HEADER, "header size");
_Static_assert(offsetof(CUpti_ActivityKernel13, name) == 104, "kernel name offset");
_Static_assert(offsetof(CUpti_ActivityKernel9, name) == 104, "kernel name offset (v9)");

/* -- libcupti, loaded at the first START ---------------------------------------- */
static struct {
    void *lib;
    __typeof__(cuptiGetVersion) *getVersion;
    __typeof__(cuptiGetResultString) *resultString;
    __typeof__(cuptiSubscribe) *subscribe;
    __typeof__(cuptiUnsubscribe) *unsubscribe;
    __typeof__(cuptiActivityRegisterCallbacks) *registerCallbacks;
    __typeof__(cuptiActivityEnable) *enable;
    __typeof__(cuptiActivityDisable) *disable;
    __typeof__(cuptiActivityFlushAll) *flushAll;
    __typeof__(cuptiActivityGetStructSize) *structSize;
    __typeof__(cuptiActivityGetNumDroppedRecords) *numDropped;
    /* optional (older CUPTI may lack them) */
    __typeof__(cuptiActivityFlushPeriod) *flushPeriod;
    __typeof__(cuptiSetThreadIdType) *setThreadIdType;
    __typeof__(cuptiActivityRegisterTimestampCallback) *registerTimestamp;
    __typeof__(cuptiActivityEnableRuntimeApi) *enableRuntimeApi;
    __typeof__(cuptiActivityEnableDriverApi) *enableDriverApi;
    __typeof__(cuptiGetCallbackName) *callbackName;
    __typeof__(cuptiGetTimestamp) *getTimestamp;
} C;

static struct rls_gpu_header *H;      /* the region */
static uint8_t *DATA, *NAMES;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;     /* buffer callbacks, pool, names */
static pthread_mutex_t ctl = PTHREAD_MUTEX_INITIALIZER;      /* start/stop */
static uint8_t *pool[POOL_MAX];
static int pool_n;
static uint64_t *name_set;
static CUpti_SubscriberHandle subscriber;
static int registered, api_cbids_on;
static uint64_t records_before_start;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t CUPTIAPI mono_timestamp(void) { return now_ns(); }

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);   /* shared: the monitor maps it too */
}

static void set_status(int code, const char *fmt, const char *detail) {
    H->status = code;
    snprintf(H->status_msg, sizeof(H->status_msg), fmt, detail ? detail : "");
}

static const char *result_text(CUptiResult r) {
    const char *s = NULL;
    if (C.resultString && C.resultString(r, &s) == CUPTI_SUCCESS && s)
        return s;
    return "unknown CUPTI error";
}

/* A CUPTI failure as one of our status codes, with CUPTI's own words. */
static int fail(CUptiResult r, const char *what) {
    char detail[200];
    snprintf(detail, sizeof(detail), "%s: %s (%d)", what, result_text(r), (int)r);
    switch (r) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
        set_status(RLS_ST_NO_PERMISSION, "%s", detail);
        break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
        set_status(RLS_ST_OTHER_SUBSCRIBER, "%s", detail);
        break;
    case CUPTI_ERROR_NOT_INITIALIZED:
        set_status(RLS_ST_NO_DRIVER, "%s", detail);
        break;
    case CUPTI_ERROR_INVALID_DEVICE:
        set_status(RLS_ST_NO_GPU, "%s", detail);
        break;
    default:
        set_status(RLS_ST_CUPTI_ERROR, "%s", detail);
    }
    return -1;
}

/* -- the region ------------------------------------------------------------------ */
static int map_region(void) {
    if (H)
        return 0;
    size_t total = RLS_GPU_HEADER + (size_t)RLS_GPU_DATA_BYTES + RLS_GPU_NAMES_BYTES;
    int fd = (int)syscall(SYS_memfd_create, RLS_GPU_MEMFD_NAME, 1 /* MFD_CLOEXEC */);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)total) != 0) {
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);                          /* the mapping keeps it (and /proc/PID/maps shows it) */
    if (p == MAP_FAILED)
        return -1;
    struct rls_gpu_header *h = p;
    memcpy(h->magic, RLS_GPU_MAGIC, 8);
    h->version = RLS_GPU_VERSION;
    h->header_size = RLS_GPU_HEADER;
    h->data_capacity = RLS_GPU_DATA_BYTES;
    h->names_capacity = RLS_GPU_NAMES_BYTES;
    h->agent_pid = (uint32_t)getpid();
    h->built_version = CUPTI_API_VERSION;
    h->name_offset = offsetof(CUpti_ActivityKernel13, name);
    DATA = (uint8_t *)p + RLS_GPU_HEADER;
    NAMES = DATA + RLS_GPU_DATA_BYTES;
    __atomic_store_n(&H, h, __ATOMIC_RELEASE);
    return 0;
}

static void map_region_once(void) { (void)map_region(); }

/* Kernel names: CUPTI's records carry a pointer; publish each pointer's text once,
 * before the buffer that uses it, so the monitor never reads this process's memory. */
static void intern_name(uint64_t ptr) {
    if (!ptr || !name_set)
        return;
    uint64_t i = (ptr * 0x9E3779B97F4A7C15ull) >> 50;          /* 14 bits */
    for (unsigned probes = 0; probes < NAME_SLOTS; probes++, i = (i + 1) & (NAME_SLOTS - 1)) {
        if (name_set[i] == ptr)
            return;
        if (name_set[i] == 0) {
            name_set[i] = ptr;
            break;
        }
    }
    const char *s = (const char *)(uintptr_t)ptr;
    uint32_t len = (uint32_t)strnlen(s, NAME_MAX_BYTES);
    uint64_t need = (sizeof(struct rls_name) + len + 7) & ~7ull;
    uint64_t at = H->names_head;
    if (at + need > H->names_capacity) {
        H->names_dropped++;
        return;
    }
    struct rls_name *n = (struct rls_name *)(NAMES + at);
    n->ptr = ptr;
    n->len = len;
    n->reserved = 0;
    memcpy(n + 1, s, len);
    __atomic_store_n(&H->names_head, at + need, __ATOMIC_RELEASE);
}

/* Records per kind in a buffer, its kernels' names interned. Stops at a kind whose size
 * CUPTI did not tell us (counted: the rest of that buffer is lost). Returns the bytes walked. */
static size_t walk(const uint8_t *buf, size_t valid, uint32_t count[RLS_GPU_NKINDS]) {
    size_t off = 0;
    while (off + sizeof(uint32_t) <= valid) {
        uint32_t kind = *(const uint32_t *)(buf + off);
        uint32_t size = kind < RLS_GPU_NKINDS ? H->kind_size[kind] : 0;
        if (!size || off + size > valid) {
            H->unknown_records++;
            break;
        }
        if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || kind == CUPTI_ACTIVITY_KIND_KERNEL)
            intern_name(*(const uint64_t *)(buf + off + H->name_offset));
        count[kind]++;
        off += size;
    }
    return off;
}

/* Reserve one frame of `len` bytes at logical position *head (not yet published).
 * NULL when it does not fit: the monitor is behind, and the records are dropped. */
static uint8_t *ring_reserve(uint64_t *head, uint32_t len, uint16_t kind, uint32_t records) {
    uint64_t cap = H->data_capacity;
    uint64_t size = (sizeof(struct rls_frame) + len + 7) & ~7ull;
    uint64_t at = *head, tail = __atomic_load_n(&H->tail, __ATOMIC_ACQUIRE);
    uint64_t rem = cap - at % cap;
    uint64_t pad = rem < size ? rem : 0;       /* frames never wrap: pad to the end */
    if (size > cap / 2 || at + pad + size - tail > cap)
        return NULL;
    if (pad) {
        if (rem >= sizeof(struct rls_frame)) {
            struct rls_frame *p = (struct rls_frame *)(DATA + at % cap);
            memset(p, 0, sizeof(*p));
            p->type = RLS_FRAME_PAD;
            p->len = (uint32_t)(rem - sizeof(*p));
        }
        at += pad;
    }
    struct rls_frame *f = (struct rls_frame *)(DATA + at % cap);
    f->len = len;
    f->type = RLS_FRAME_RECORDS;
    f->kind = kind;
    f->records = records;
    f->reserved = 0;
    *head = at + size;
    return (uint8_t *)(f + 1);
}

/* Copy a buffer's records into one frame per kind, runs at a time: the monitor then
 * decodes each frame as one numpy array. Published with a single head update. */
static void put_grouped(const uint8_t *buf, size_t walked, const uint32_t count[RLS_GPU_NKINDS]) {
    uint8_t *dst[RLS_GPU_NKINDS] = {0};
    uint64_t head = H->head;
    for (uint32_t k = 0; k < RLS_GPU_NKINDS; k++) {
        if (!count[k])
            continue;
        uint64_t len = (uint64_t)count[k] * H->kind_size[k];
        dst[k] = len <= UINT32_MAX ? ring_reserve(&head, (uint32_t)len, (uint16_t)k, count[k]) : NULL;
        if (dst[k]) {
            H->records += count[k];
            H->buffers++;
        } else {
            H->dropped_records += count[k];
        }
    }
    size_t off = 0;
    while (off < walked) {
        uint32_t kind = *(const uint32_t *)(buf + off), size = H->kind_size[kind];
        size_t run = off + size;
        while (run < walked && *(const uint32_t *)(buf + run) == kind)
            run += size;
        if (dst[kind]) {
            memcpy(dst[kind], buf + off, run - off);
            dst[kind] += run - off;
        }
        off = run;
    }
    __atomic_store_n(&H->head, head, __ATOMIC_RELEASE);
}

/* -- CUPTI's buffer callbacks ---------------------------------------------------------- */
static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    uint8_t *b = NULL;
    pthread_mutex_lock(&lock);
    if (pool_n > 0) {
        b = pool[--pool_n];
    } else if (H->alloc_buffers < POOL_MAX) {
        b = aligned_alloc(8, BUF_BYTES);
        if (b)
            H->alloc_buffers++;
    }
    pthread_mutex_unlock(&lock);
    *buffer = b;                       /* NULL: CUPTI drops and counts (cupti_dropped) */
    *size = b ? BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    if (!buffer)
        return;
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&lock);
    if (valid) {
        uint32_t count[RLS_GPU_NKINDS] = {0};
        size_t walked = walk(buffer, valid, count);
        put_grouped(buffer, walked, count);
    }
    if (pool_n < POOL_MAX)
        pool[pool_n++] = buffer;
    else
        free(buffer);
    H->callback_ns += now_ns() - t0;
    pthread_mutex_unlock(&lock);
}

static void CUPTIAPI no_callback(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *p) {
    (void)u; (void)d; (void)c; (void)p;
}

/* -- start / stop --------------------------------------------------------------------- */
#define NEED(f, name) (C.f = (__typeof__(C.f))dlsym(C.lib, name)) == NULL
#define WANT(f, name) (C.f = (__typeof__(C.f))dlsym(C.lib, name))

static void *mapped_cupti(void) {
    /* the libcupti the process already has (torch's, say) wins over any path */
    const char *names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
    for (unsigned i = 0; i < sizeof(names) / sizeof(*names); i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
        if (h)
            return h;
    }
    return NULL;
}

static int load_cupti(void) {
    if (C.lib)
        return 0;
    void *lib = mapped_cupti();
    if (!lib && H->cupti_path[0]) {
        H->cupti_path[sizeof(H->cupti_path) - 1] = 0;
        lib = dlopen(H->cupti_path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!lib)
        lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        set_status(RLS_ST_NO_LIBCUPTI, "cannot load libcupti: %s", e ? e : "not found");
        return -1;
    }
    C.lib = lib;
    if (NEED(getVersion, "cuptiGetVersion") || NEED(resultString, "cuptiGetResultString") ||
        NEED(subscribe, "cuptiSubscribe") || NEED(unsubscribe, "cuptiUnsubscribe") ||
        NEED(registerCallbacks, "cuptiActivityRegisterCallbacks") || NEED(enable, "cuptiActivityEnable") ||
        NEED(disable, "cuptiActivityDisable") || NEED(flushAll, "cuptiActivityFlushAll") ||
        NEED(structSize, "cuptiActivityGetStructSize") ||
        NEED(numDropped, "cuptiActivityGetNumDroppedRecords")) {
        set_status(RLS_ST_UNSUPPORTED, "libcupti lacks %s: CUPTI 13.0 or newer is needed", "a function");
        C.lib = NULL;
        return -1;
    }
    WANT(flushPeriod, "cuptiActivityFlushPeriod");
    WANT(setThreadIdType, "cuptiSetThreadIdType");
    WANT(registerTimestamp, "cuptiActivityRegisterTimestampCallback");
    WANT(enableRuntimeApi, "cuptiActivityEnableRuntimeApi");
    WANT(enableDriverApi, "cuptiActivityEnableDriverApi");
    WANT(callbackName, "cuptiGetCallbackName");
    WANT(getTimestamp, "cuptiGetTimestamp");
    uint32_t v = 0;
    if (C.getVersion(&v) == CUPTI_SUCCESS)
        H->cupti_version = v;
    return 0;
}

static const CUpti_ActivityKind ACTIVITY[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
};
static const CUpti_ActivityKind WALKED[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
};

static int wanted_api(const char *name) {
    /* only the calls that put work on the GPU: they are what the thread join needs */
    return name && (strstr(name, "Launch") || strstr(name, "Memcpy") || strstr(name, "Memset") ||
                    strstr(name, "memcpy") || strstr(name, "memset"));
}

/* API records for launches, copies and sets only, when CUPTI can filter by cbid;
 * otherwise the whole runtime and driver API kinds. */
static void api_records(int on) {
    if (C.enableRuntimeApi && C.enableDriverApi && C.callbackName) {
        const struct { CUpti_CallbackDomain d; uint32_t n; __typeof__(cuptiActivityEnableRuntimeApi) *f; } doms[] = {
            {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, C.enableRuntimeApi},
            {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, C.enableDriverApi},
        };
        for (unsigned k = 0; k < 2; k++)
            for (uint32_t cb = 1; cb < doms[k].n; cb++) {
                const char *name = NULL;
                if (C.callbackName(doms[k].d, cb, &name) == CUPTI_SUCCESS && wanted_api(name))
                    doms[k].f(cb, (uint8_t)on);
            }
        api_cbids_on = on;
        return;
    }
    if (on) {
        C.enable(CUPTI_ACTIVITY_KIND_RUNTIME);
        C.enable(CUPTI_ACTIVITY_KIND_DRIVER);
    } else {
        C.disable(CUPTI_ACTIVITY_KIND_RUNTIME);
        C.disable(CUPTI_ACTIVITY_KIND_DRIVER);
    }
}

static void fill_pool(void) {
    if (!name_set)
        name_set = calloc(NAME_SLOTS, sizeof(uint64_t));
    pthread_mutex_lock(&lock);
    while (pool_n < POOL_PREALLOC && H->alloc_buffers < POOL_MAX) {
        uint8_t *b = aligned_alloc(8, BUF_BYTES);
        if (!b)
            break;
        pool[pool_n++] = b;
        H->alloc_buffers++;
    }
    pthread_mutex_unlock(&lock);
}

static void set_clock(void) {
    if (C.registerTimestamp && C.registerTimestamp(mono_timestamp) == CUPTI_SUCCESS) {
        H->clock = 0;
        return;
    }
    uint64_t c = 0, a = now_ns();
    if (C.getTimestamp)
        C.getTimestamp(&c);
    uint64_t b = now_ns();
    H->clock = 1;
    H->clock_offset_ns = (int64_t)c - (int64_t)((a + b) / 2);
}

/* CUPTI without a driver fails with an unhelpful CUPTI_ERROR_UNKNOWN: say what is missing. */
static int have_driver(void) {
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) || dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL))
        return 1;
    const char *e = dlerror();
    set_status(RLS_ST_NO_DRIVER, "no NVIDIA driver: %s", e ? e : "libcuda.so.1 not found");
    return 0;
}

static int do_start(void) {
    if (H->state == RLS_STATE_TRACING)
        return 0;
    if (!have_driver() || load_cupti() != 0)
        return -1;
    CUptiResult r = C.subscribe(&subscriber, (CUpti_CallbackFunc)no_callback, NULL);
    if (r != CUPTI_SUCCESS) {       /* another subscriber (torch.profiler, Nsight), or no driver */
        subscriber = NULL;
        return fail(r, "cuptiSubscribe");
    }
    for (unsigned i = 0; i < sizeof(WALKED) / sizeof(*WALKED); i++) {
        size_t sz = 0;
        if (C.structSize(WALKED[i], 0, &sz) == CUPTI_SUCCESS && sz < 65536)
            H->kind_size[WALKED[i]] = (uint32_t)sz;
    }
    if (!H->kind_size[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL]) {
        C.unsubscribe(subscriber);
        subscriber = NULL;
        set_status(RLS_ST_UNSUPPORTED, "CUPTI did not give the kernel record size%s", "");
        return -1;
    }
    if (C.setThreadIdType)            /* gettid(), the ids the eBPF probes see */
        C.setThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    fill_pool();
    if (!registered) {
        r = C.registerCallbacks(buffer_requested, buffer_completed);
        if (r != CUPTI_SUCCESS) {
            C.unsubscribe(subscriber);
            subscriber = NULL;
            return fail(r, "cuptiActivityRegisterCallbacks");
        }
        registered = 1;
    }
    set_clock();
    for (unsigned i = 0; i < sizeof(ACTIVITY) / sizeof(*ACTIVITY); i++) {
        r = C.enable(ACTIVITY[i]);
        if (r != CUPTI_SUCCESS) {
            for (unsigned j = 0; j < i; j++)
                C.disable(ACTIVITY[j]);
            C.unsubscribe(subscriber);
            subscriber = NULL;
            return fail(r, "cuptiActivityEnable");
        }
    }
    if (H->options & RLS_OPT_API)
        api_records(1);
    if (C.flushPeriod)
        C.flushPeriod(FLUSH_PERIOD_MS);
    records_before_start = H->records;
    H->started_ns = now_ns();
    H->generation++;
    __atomic_store_n(&H->state, RLS_STATE_TRACING, __ATOMIC_RELEASE);
    set_status(RLS_ST_OK, "CUPTI activity on%s", "");
    return 0;
}

static void update_dropped(void) {
    size_t n = 0;
    if (C.numDropped && C.numDropped(NULL, 0, &n) == CUPTI_SUCCESS)
        H->cupti_dropped = n;
}

static void do_stop(void) {
    if (H->state != RLS_STATE_TRACING)
        return;
    for (unsigned i = 0; i < sizeof(ACTIVITY) / sizeof(*ACTIVITY); i++)
        C.disable(ACTIVITY[i]);
    if (H->options & RLS_OPT_API)
        api_records(0);
    C.flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    update_dropped();
    if (subscriber)
        C.unsubscribe(subscriber);     /* torch.profiler may subscribe again once we are gone */
    subscriber = NULL;
    H->stopped_ns = now_ns();
    H->flushes++;
    __atomic_store_n(&H->state, RLS_STATE_IDLE, __ATOMIC_RELEASE);
}

static void do_flush(void) {
    if (H->state != RLS_STATE_TRACING)
        return;
    C.flushAll(0);
    update_dropped();
    H->flushes++;
}

static int exiting;     /* set under ctl once the process has begun to exit: no command runs after */

static void run(uint32_t cmd) {
    pthread_mutex_lock(&ctl);
    /* exiting: the runtime is being torn down, and CUPTI calls from here could crash the process */
    if (!__atomic_load_n(&exiting, __ATOMIC_ACQUIRE)) {
        if (cmd == RLS_CMD_START)
            do_start();
        else if (cmd == RLS_CMD_STOP)
            do_stop();
        else if (cmd == RLS_CMD_FLUSH)
            do_flush();
    }
    pthread_mutex_unlock(&ctl);
}

/* -- the control thread ------------------------------------------------------------- */
static int monitor_gone(void) {
    uint64_t hb = __atomic_load_n(&H->heartbeat_ns, __ATOMIC_ACQUIRE);
    if (now_ns() > hb + HEARTBEAT_GRACE_NS)
        return 1;
    uint32_t pid = H->monitor_pid;
    return pid && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static void *control(void *arg) {
    (void)arg;
    uint32_t handled = 0;
    for (;;) {
        uint32_t seq = __atomic_load_n(&H->cmd_seq, __ATOMIC_ACQUIRE);
        if (seq == handled) {
            /* idle: sleep until a command; tracing: wake each second to see the monitor */
            struct timespec one = {1, 0};
            int tracing = __atomic_load_n(&H->state, __ATOMIC_ACQUIRE) == RLS_STATE_TRACING;
            futex(&H->cmd_seq, FUTEX_WAIT, seq, tracing ? &one : NULL);
            seq = __atomic_load_n(&H->cmd_seq, __ATOMIC_ACQUIRE);
        }
        if (seq != handled) {
            run(__atomic_load_n(&H->cmd, __ATOMIC_ACQUIRE));
            handled = seq;
            __atomic_store_n(&H->ack_seq, seq, __ATOMIC_RELEASE);
            futex(&H->ack_seq, FUTEX_WAKE, INT32_MAX, NULL);
        } else if (H->state == RLS_STATE_TRACING && monitor_gone()) {
            run(RLS_CMD_STOP);
            set_status(RLS_ST_MONITOR_GONE, "no monitor: tracing stopped%s", "");
        }
    }
    return NULL;
}

static void start_control(void) {
    static int started;
    if (started)
        return;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64 << 10);
    sigset_t all, old;                 /* the target's signals are for its own threads */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    if (pthread_create(&t, &a, control, NULL) == 0) {
        started = 1;
        pthread_setname_np(t, "rlscope-gpu");
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
}

/* The process ends (a launched command that finishes): wait for a command in flight (a
 * budget window's start or stop; skipped, it ran on into the runtime's teardown and lost
 * what CUPTI held), refuse any later one, hand over what CUPTI still holds, then give the
 * monitor a moment to take it before the region goes. */
static void at_exit(void) {
    if (!H || H->agent_pid != (uint32_t)getpid())
        return;         /* a forked child: the region and the tracing are its parent's */
    struct timespec by;
    clock_gettime(CLOCK_REALTIME, &by);
    by.tv_sec += EXIT_LOCK_S;
    int locked = pthread_mutex_timedlock(&ctl, &by) == 0;
    __atomic_store_n(&exiting, 1, __ATOMIC_RELEASE);
    int tracing = locked && H->state == RLS_STATE_TRACING;
    if (tracing) {
        C.flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        update_dropped();
    }
    if (locked)
        pthread_mutex_unlock(&ctl);
    if (!tracing)
        return;
    uint64_t t = now_ns(), claim_by = t + EXIT_CLAIM_NS, until = t + EXIT_DRAIN_NS;
    while ((t = now_ns()) < until) {
        if (!H->monitor_pid ? t > claim_by : monitor_gone() || __atomic_load_n(&H->tail, __ATOMIC_ACQUIRE) == H->head)
            break;
        usleep(5000);
    }
}

static void setup(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, map_region_once);
    if (!H)
        return;
    start_control();
    static int exit_hook;
    if (!exit_hook && atexit(at_exit) == 0)
        exit_hook = 1;
}

__attribute__((constructor)) static void agent_init(void) { setup(); }

/* `rlscope-top run`'s own child (its parent is RLSCOPE_GPU_HOLD_PPID) waits in cuInit until
 * the monitor claims the region: the monitor claims it once the probes are attached, so a
 * program that is not Python (no sitecustomize hold) cannot make its kernels before the
 * session starts and have them fall outside it. A grandchild never waits (nobody claims
 * its region), nor does any process once its launcher is gone. */
static void hold_for_claim(void) {
    const char *ppid = getenv("RLSCOPE_GPU_HOLD_PPID");
    if (!ppid || atoi(ppid) != (int)getppid() || H->state != RLS_STATE_TRACING)
        return;
    uint64_t until = now_ns() + LAUNCH_CLAIM_NS;
    while (!__atomic_load_n(&H->monitor_pid, __ATOMIC_ACQUIRE) && now_ns() < until && atoi(ppid) == (int)getppid())
        usleep(2000);
}

/* CUDA_INJECTION64_PATH: the driver calls this during cuInit. Tracing starts here in
 * launch mode, before the first kernel; the monitor has 10 s to take the region over. */
EXPORT int InitializeInjection(void) {
    setup();
    if (!H)
        return 1;
    const char *auto_start = getenv("RLSCOPE_GPU_AUTOSTART");
    if (auto_start && auto_start[0] == '1') {
        const char *path = getenv("RLSCOPE_CUPTI_LIB");
        if (path && !H->cupti_path[0])
            snprintf(H->cupti_path, sizeof(H->cupti_path), "%s", path);
        H->options |= RLS_OPT_API;
        __atomic_store_n(&H->heartbeat_ns, now_ns(), __ATOMIC_RELEASE);
        run(RLS_CMD_START);
        hold_for_claim();
    }
    return 1;
}

/* For tests and bench/gpu_record_rate.py: the region's address in this process. */
EXPORT void *rlscope_gpu_region(void) {
    setup();
    return H;
}
