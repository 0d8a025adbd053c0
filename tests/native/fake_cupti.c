/* A stand-in libcupti for machines without a GPU (tests and bench/gpu_record_rate.py).
 *
 * It implements the CUPTI functions the agent (probes/gpu_agent.c) calls, with the
 * real prototypes and record structs from the nvidia-cuda-cupti wheel's headers, and
 * delivers completed buffers from a worker thread, as CUPTI does. The target program
 * makes "GPU work" with fake_cupti_kernels() and friends: each call appends real
 * CUpti_ActivityKernel13 / CUpti_ActivityAPI / Memcpy7 / Memset5 records.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>
#include <cupti_runtime_cbid.h>
#include <cupti_version.h>

#define EXPORT __attribute__((visibility("default")))
#define QMAX 256

static CUpti_BuffersCallbackRequestFunc req_cb;
static CUpti_BuffersCallbackCompleteFunc done_cb;
static CUpti_TimestampCallbackFunc ts_cb;
static int enabled[64], rt_api[1024], rt_kind, subscribed, other_subscriber, fail_enable, untimed;
static uint32_t period_ms, flush_hold_ms;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER, drained = PTHREAD_COND_INITIALIZER;
static uint8_t *cur;
static size_t cur_size, cur_used;
static struct { uint8_t *b; size_t size, used; } q[QMAX];
static int qn, busy, worker_started;
static uint32_t corr;
static uint64_t gpu_clock, dropped, emitted;
static const char *NAMES[] = {"fake_gemm_kernel", "fake_elementwise_kernel", "fake_reduce_kernel", "fake_copy_kernel"};

static uint64_t now(void) {
    if (ts_cb)
        return ts_cb();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + 5000000000000ull;   /* own clock */
}

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    for (;;) {
        while (qn == 0) {
            if (period_ms && cur_used) {
                struct timespec t;
                clock_gettime(CLOCK_REALTIME, &t);
                t.tv_nsec += (long)period_ms * 1000000L;
                t.tv_sec += t.tv_nsec / 1000000000L;
                t.tv_nsec %= 1000000000L;
                if (pthread_cond_timedwait(&cv, &m, &t) != 0 && qn == 0 && cur_used) {
                    q[qn].b = cur; q[qn].size = cur_size; q[qn].used = cur_used; qn++;   /* periodic flush */
                    cur = NULL;
                    cur_used = 0;
                }
            } else {
                pthread_cond_wait(&cv, &m);
            }
        }
        uint8_t *b = q[0].b;
        size_t size = q[0].size, used = q[0].used;
        memmove(q, q + 1, (size_t)(qn - 1) * sizeof(q[0]));
        qn--;
        busy = 1;
        pthread_mutex_unlock(&m);
        done_cb(NULL, 0, b, size, used);
        pthread_mutex_lock(&m);
        busy = 0;
        pthread_cond_broadcast(&drained);
    }
    return NULL;
}

static void complete_locked(void) {
    if (!cur)
        return;
    if (qn == QMAX) {                 /* the consumer is hopelessly behind: CUPTI would drop too */
        dropped += cur_used / 8;
        cur_used = 0;
        return;
    }
    q[qn].b = cur; q[qn].size = cur_size; q[qn].used = cur_used; qn++;
    cur = NULL;
    cur_used = 0;
    pthread_cond_signal(&cv);
}

static void *slot_locked(size_t size) {
    if (cur && cur_used + size > cur_size)
        complete_locked();
    if (!cur) {
        size_t max_rec = 0;
        pthread_mutex_unlock(&m);      /* CUPTI calls out without its own locks held */
        uint8_t *b = NULL;
        size_t sz = 0;
        req_cb(&b, &sz, &max_rec);
        pthread_mutex_lock(&m);
        if (!b || sz < size) {
            dropped++;
            return NULL;
        }
        cur = b;
        cur_size = sz;
        cur_used = 0;
    }
    void *p = cur + cur_used;
    cur_used += size;
    memset(p, 0, size);
    emitted++;
    return p;
}

static void api_record(uint32_t c, uint64_t t0, uint64_t t1) {
    if (!(rt_kind || rt_api[CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000]))
        return;
    CUpti_ActivityAPI *a = slot_locked(sizeof(*a));
    if (!a)
        return;
    a->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a->cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    a->start = t0;
    a->end = t1;
    a->processId = (uint32_t)getpid();
    a->threadId = (uint32_t)syscall(SYS_gettid);
    a->correlationId = c;
}

/* -- what the target calls to make "GPU work" ----------------------------------------- */
EXPORT void fake_cupti_kernels(uint32_t n, uint64_t dur_ns, uint32_t name_id) {
    pthread_mutex_lock(&m);
    for (uint32_t i = 0; i < n && (enabled[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] || rt_kind); i++) {
        uint32_t c = ++corr;
        uint64_t t = now();
        api_record(c, t, t + 2000);
        if (!enabled[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL])
            continue;
        CUpti_ActivityKernel13 *k = slot_locked(sizeof(*k));
        if (!k)
            continue;
        uint64_t start = gpu_clock > t + 5000 ? gpu_clock : t + 5000;    /* launch latency 5 us */
        k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k->start = untimed ? 0 : start;       /* 0: what CUPTI 12.6u2-13.0 gave with a timestamp callback */
        k->end = untimed ? 0 : start + dur_ns;
        k->completed = k->end;
        k->deviceId = 0;
        k->contextId = 1;
        k->streamId = 7;
        k->correlationId = c;
        k->name = NAMES[name_id % 4];
        k->gridX = k->gridY = k->gridZ = 1;
        k->blockX = 128;
        k->blockY = k->blockZ = 1;
        gpu_clock = k->end;
    }
    pthread_mutex_unlock(&m);
}

static void copy_or_set(uint32_t n, uint64_t bytes, int kind) {
    pthread_mutex_lock(&m);
    for (uint32_t i = 0; i < n && enabled[kind]; i++) {
        uint32_t c = ++corr;
        uint64_t t = now();
        api_record(c, t, t + 3000);
        uint64_t start = gpu_clock > t + 5000 ? gpu_clock : t + 5000;
        uint64_t end = start + 1000 + bytes / 10;          /* 10 GB/s */
        if (kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            CUpti_ActivityMemcpy7 *r = slot_locked(sizeof(*r));
            if (!r)
                continue;
            r->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
            r->copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
            r->bytes = bytes;
            r->start = start;
            r->end = end;
            r->deviceId = 0;
            r->streamId = 7;
            r->correlationId = c;
        } else {
            CUpti_ActivityMemset5 *r = slot_locked(sizeof(*r));
            if (!r)
                continue;
            r->kind = CUPTI_ACTIVITY_KIND_MEMSET;
            r->bytes = bytes;
            r->start = start;
            r->end = end;
            r->deviceId = 0;
            r->streamId = 7;
            r->correlationId = c;
        }
        gpu_clock = end;
    }
    pthread_mutex_unlock(&m);
}

EXPORT void fake_cupti_memcpy(uint32_t n, uint64_t bytes) { copy_or_set(n, bytes, CUPTI_ACTIVITY_KIND_MEMCPY); }
EXPORT void fake_cupti_memset(uint32_t n, uint64_t bytes) { copy_or_set(n, bytes, CUPTI_ACTIVITY_KIND_MEMSET); }

/* Make the next subscribe fail as if torch.profiler held CUPTI, or enable fail with `code`. */
EXPORT void fake_cupti_configure(int busy_subscriber, int enable_error) {
    other_subscriber = busy_subscriber;
    fail_enable = enable_error;
}

/* Each flush then takes `ms` more once it has delivered: a command in flight when the process exits. */
EXPORT void fake_cupti_flush_hold(uint32_t ms) { flush_hold_ms = ms; }

EXPORT void fake_cupti_untimed(int on) { untimed = on; }

EXPORT uint64_t fake_cupti_emitted(void) { return emitted; }

/* -- the CUPTI API the agent uses --------------------------------------------------------- */
CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version) {
    *version = CUPTI_API_VERSION;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str) {
    *str = result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
         : result == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES ? "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"
         : "CUPTI_ERROR_UNKNOWN";
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *s, CUpti_CallbackFunc cb, void *u) {
    (void)cb;
    (void)u;
    if (other_subscriber || subscribed)
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    subscribed = 1;
    *s = (CUpti_SubscriberHandle)&subscribed;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle s) {
    (void)s;
    subscribed = 0;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc r,
                                                    CUpti_BuffersCallbackCompleteFunc c) {
    req_cb = r;
    done_cb = c;
    pthread_mutex_lock(&m);
    if (!worker_started) {
        pthread_t t;
        worker_started = pthread_create(&t, NULL, worker, NULL) == 0;
        if (worker_started)
            pthread_detach(t);
    }
    pthread_mutex_unlock(&m);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
    if (fail_enable)
        return (CUptiResult)fail_enable;
    if (kind == CUPTI_ACTIVITY_KIND_RUNTIME)
        rt_kind = 1;
    if ((unsigned)kind < 64)
        enabled[kind] = 1;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
    if (kind == CUPTI_ACTIVITY_KIND_RUNTIME)
        rt_kind = 0;
    if ((unsigned)kind < 64)
        enabled[kind] = 0;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    pthread_mutex_lock(&m);
    if (cur_used)
        complete_locked();
    while (qn || busy)                /* delivered before it returns, as a forced flush is */
        pthread_cond_wait(&drained, &m);
    pthread_mutex_unlock(&m);
    if (flush_hold_ms)
        usleep(flush_hold_ms * 1000u);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushPeriod(uint32_t time) {
    pthread_mutex_lock(&m);
    period_ms = time;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&m);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetStructSize(CUpti_ActivityKind kind, uint32_t version, size_t *size) {
    (void)version;
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: *size = sizeof(CUpti_ActivityKernel13); break;
    case CUPTI_ACTIVITY_KIND_MEMCPY: *size = sizeof(CUpti_ActivityMemcpy7); break;
    case CUPTI_ACTIVITY_KIND_MEMSET: *size = sizeof(CUpti_ActivityMemset5); break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: *size = sizeof(CUpti_ActivityAPI); break;
    default: return CUPTI_ERROR_INVALID_KIND;
    }
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *n) {
    (void)ctx;
    (void)stream;
    *n = dropped;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type) {
    (void)type;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
    ts_cb = f;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *t) {
    *t = now();
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
    if (cbid < 1024)
        rt_api[cbid] = enable;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
    (void)cbid;
    (void)enable;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain d, uint32_t cbid, const char **name) {
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000)
        *name = "cudaLaunchKernel_v7000";
    else if (d == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020)
        *name = "cudaGetDevice_v3020";
    else
        return CUPTI_ERROR_INVALID_PARAMETER;
    return CUPTI_SUCCESS;
}
