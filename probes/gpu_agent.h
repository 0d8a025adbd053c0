/* rlscope-top GPU agent: layout of the shared region (docs/gpu-agent.md).
 *
 * The agent maps a memfd named "rlscope-top-gpu" in the target. The monitor finds
 * it in /proc/PID/maps and maps the same pages through /proc/PID/map_files. All
 * fields are little-endian and naturally aligned; probes/gpu_region.py holds the
 * same offsets (tests/test_gpu_native.py checks that they agree).
 */
#ifndef RLSCOPE_GPU_AGENT_H
#define RLSCOPE_GPU_AGENT_H

#include <stdint.h>

#define RLS_GPU_MEMFD_NAME "rlscope-top-gpu"
#define RLS_GPU_MAGIC "RLSGPU\0\1"
#define RLS_GPU_VERSION 1
#define RLS_GPU_HEADER 4096
#define RLS_GPU_DATA_BYTES (32u << 20)   /* ring of whole CUPTI buffers */
#define RLS_GPU_NAMES_BYTES (1u << 20)   /* append-only kernel names */
#define RLS_GPU_NKINDS 32

/* Commands (monitor -> agent). */
#define RLS_CMD_NONE 0
#define RLS_CMD_START 1
#define RLS_CMD_STOP 2
#define RLS_CMD_FLUSH 3

/* Agent states. */
#define RLS_STATE_IDLE 0
#define RLS_STATE_TRACING 1

/* Status codes (the agent's last answer). */
#define RLS_ST_OK 0
#define RLS_ST_NO_LIBCUPTI 1
#define RLS_ST_NO_DRIVER 2
#define RLS_ST_NO_GPU 3
#define RLS_ST_NO_PERMISSION 4
#define RLS_ST_OTHER_SUBSCRIBER 5
#define RLS_ST_UNSUPPORTED 6
#define RLS_ST_CUPTI_ERROR 7
#define RLS_ST_MONITOR_GONE 8

/* Frame types in the data ring. */
#define RLS_FRAME_RECORDS 1  /* CUPTI records of one kind (`kind`), as CUPTI wrote them */
#define RLS_FRAME_PAD 2      /* skip to the physical end of the ring */

/* Monitor -> agent option bits. */
#define RLS_OPT_API 1        /* also ask for launch/memcpy/memset API records (the thread join) */

struct rls_frame {           /* 16 bytes, then the payload; frames are 8-aligned */
    uint32_t len;            /* payload bytes */
    uint16_t type;
    uint16_t kind;           /* CUPTI activity kind of every record in the payload */
    uint32_t records;        /* len / kind_size[kind] */
    uint32_t reserved;
};

struct rls_name {            /* in the names area, 8-aligned */
    uint64_t ptr;            /* the name pointer as CUPTI's kernel records carry it */
    uint32_t len;            /* bytes of the name that follow (no NUL) */
    uint32_t reserved;
};

struct rls_gpu_header {
    char magic[8];               /*   0 */
    uint32_t version;            /*   8 */
    uint32_t header_size;        /*  12 */
    uint64_t data_capacity;      /*  16 */
    uint64_t names_capacity;     /*  24 */
    uint32_t agent_pid;          /*  32 */
    uint32_t state;              /*  36 */
    uint32_t cmd_seq;            /*  40 futex: the monitor bumps it after writing cmd */
    uint32_t cmd;                /*  44 */
    uint32_t ack_seq;            /*  48 futex: the agent sets it to cmd_seq when done */
    int32_t status;              /*  52 */
    uint32_t cupti_version;      /*  56 cuptiGetVersion() of the library in use */
    uint32_t built_version;      /*  60 CUPTI_API_VERSION the agent was built with */
    uint64_t head;               /*  64 agent: ring bytes written (logical) */
    uint64_t tail;               /*  72 monitor: ring bytes consumed (logical) */
    uint64_t names_head;         /*  80 agent: names bytes written */
    uint64_t records;            /*  88 records put in the ring */
    uint64_t dropped_records;    /*  96 records of buffers that did not fit (ring full) */
    uint64_t cupti_dropped;      /* 104 records CUPTI itself dropped (no buffer) */
    uint64_t buffers;            /* 112 buffers put in the ring */
    uint64_t callback_ns;        /* 120 wall ns spent in the agent's buffer callbacks */
    uint64_t heartbeat_ns;       /* 128 monitor: CLOCK_MONOTONIC of its last tick */
    uint32_t monitor_pid;        /* 136 */
    uint32_t options;            /* 140 RLS_OPT_* */
    uint64_t started_ns;         /* 144 when tracing last started */
    uint64_t stopped_ns;         /* 152 when tracing last stopped */
    uint32_t kind_size[RLS_GPU_NKINDS]; /* 160 record bytes per CUPTI activity kind (0: not walked) */
    uint64_t unknown_records;    /* 288 buffers whose walk met a kind of unknown size */
    uint64_t names_dropped;      /* 296 names that did not fit */
    uint32_t clock;              /* 304 0: CUPTI timestamps are CLOCK_MONOTONIC (our callback); 1: offset */
    uint32_t name_offset;        /* 308 offset of `name` in a kernel record */
    int64_t clock_offset_ns;     /* 312 cupti ts - CLOCK_MONOTONIC when clock == 1 */
    uint64_t alloc_buffers;      /* 320 CUPTI buffers allocated */
    uint64_t generation;         /* 328 starts so far */
    uint64_t flushes;            /* 336 */
    char status_msg[256];        /* 344 */
    char cupti_path[512];        /* 600 monitor -> agent: the libcupti to load */
};                               /* 1112 bytes; the header area is RLS_GPU_HEADER */

#endif
