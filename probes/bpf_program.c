// rlscope-top BPF program. Per-thread exclusive-time accounting happens here, in the
// kernel, so a probe hit costs a map update and never a trip to user space.
// Categories are exclusive by priority: CUDA API > Simulator > Backend > Python.
// Time between two events of a thread goes to the category active in between,
// split by whether the thread was on or off a CPU (sched_switch).
#include <uapi/linux/ptrace.h>

#define CAT_PY 0
#define CAT_BACKEND 1
#define CAT_SIM 2
#define CAT_CUDA 3
#define NCAT 4

#define RUN_OFF 0
#define RUN_ON 1
#define RUN_UNKNOWN 2

#define EV_RANGE_BEGIN 1
#define EV_RANGE_END 2
#define EV_THREAD_EXIT 3
#define EV_ENTER 5
#define EV_EXIT 6
#define EV_ON 7
#define EV_OFF 8
#define EV_NEW 9

struct tstate {
    u64 last_ts;
    u64 ns[NCAT * 2];         // [category * 2 + (0 on CPU, 1 off CPU)]
    u64 trans[NCAT * NCAT];   // [from * NCAT + to], counted on the outermost entry of `to`
    u64 calls[NCAT];          // outermost entries per category
    u64 oh[NCAT];             // probe cost charged to each category (calibrated), ns
    u32 tgid;
    u32 depth[NCAT];
    u8 run;
    u8 pyflag;                // the thread entered a Python binding
    u8 exited;
    u8 pad[5];
    struct fwsplit fw;        // Backend split per framework (fw_prelude.c)
};

struct event {
    u64 ts;
    u32 tid;
    u32 tgid;
    u32 kind;
    u32 cat;
    char name[64];
};

BPF_HASH(targets, u32, u32, 256);
BPF_HASH(threads, u32, struct tstate, 32768);
BPF_PERCPU_ARRAY(blank, struct tstate, 1);
BPF_PERCPU_ARRAY(hits, u64, NPROBES);
BPF_RINGBUF_OUTPUT(events, 256);

// Calibrated cost of a hit, split by where it lands: before the timestamp (the
// category being left) and after it (the category being entered).
struct cost {
    u32 enter_before;
    u32 enter_after;
    u32 exit_before;
    u32 exit_after;
};
BPF_ARRAY(costs, struct cost, NPROBES);

// Per category: 0 timed (entry and exit tracked), 1 count-only (the budget removed the
// exit probes: entries are counted, time is estimated in user space).
BPF_ARRAY(modes, u32, NCAT);

// --timeline: stream every event as well (for short captures and to check the
// kernel's accounting against the reference engine in user space).
BPF_ARRAY(timeline, u32, 1);

static __always_inline void tl_emit(u32 tid, u32 tgid, u64 ts, u32 kind, u32 cat) {
    int zero = 0;
    u32 *on = timeline.lookup(&zero);
    if (!on || !*on)
        return;
    struct event *e = events.ringbuf_reserve(sizeof(struct event));
    if (!e)
        return;
    e->ts = ts;
    e->tid = tid;
    e->tgid = tgid;
    e->kind = kind;
    e->cat = cat;
    e->name[0] = 0;
    events.ringbuf_submit(e, 0);
}

static __always_inline int cur_cat(struct tstate *s) {
    if (s->depth[CAT_CUDA]) return CAT_CUDA;
    if (s->depth[CAT_SIM]) return CAT_SIM;
    if (s->depth[CAT_BACKEND]) return CAT_BACKEND;
    return CAT_PY;
}

// Charge [last_ts, now) to the current category. `hint` resolves RUN_UNKNOWN: the
// state a thread must have been in for this event to happen without a switch.
static __always_inline void advance(struct tstate *s, u64 now, u8 hint) {
    u8 r = s->run == RUN_UNKNOWN ? hint : s->run;
    int c = cur_cat(s) & 3;
    if (now > s->last_ts) {
        s->ns[c * 2 + (r == RUN_ON ? 0 : 1)] += now - s->last_ts;
        fw_time(&s->fw, c, now - s->last_ts, r != RUN_ON);
    }
    s->last_ts = now;
}

static __always_inline struct tstate *self_state(u64 now) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32, tid = (u32)id;
    if (!targets.lookup(&tgid))
        return 0;
    struct tstate *s = threads.lookup(&tid);
    if (s)
        return s->exited ? 0 : s;
    int zero = 0;
    struct tstate *b = blank.lookup(&zero);
    if (!b)
        return 0;
    threads.update(&tid, b);
    s = threads.lookup(&tid);
    if (!s)
        return 0;
    s->tgid = tgid;
    s->last_ts = now;
    s->run = RUN_ON;
    return s;
}

static __always_inline void hit(int id) {
    u64 *h = hits.lookup(&id);
    if (h)
        (*h)++;
}

static __always_inline void charge(struct tstate *s, int before_cat, u32 before, u32 after) {
    s->oh[before_cat & 3] += before;
    s->oh[cur_cat(s) & 3] += after;
    fw_oh(&s->fw, before_cat, before);
    fw_oh(&s->fw, cur_cat(s), after);
}

static __always_inline int on_enter(int id, int cat) {
    u64 now = bpf_ktime_get_ns();
    struct tstate *s = self_state(now);
    if (!s)
        return 0;
    hit(id);
    advance(s, now, RUN_ON);
    s->run = RUN_ON;
    int key = cat;
    u32 *mode = modes.lookup(&key);
    u32 count_only = mode ? *mode : 0;
    if (count_only)
        s->depth[cat & 3] = 0;   // no exit probe will come: never hold a depth
    int from = cur_cat(s) & 3;
    if (s->depth[cat & 3] == 0) {
        s->trans[from * NCAT + (cat & 3)]++;
        s->calls[cat & 3]++;
    }
    fw_enter(&s->fw, id, cat, from, s->depth[cat & 3] == 0, count_only);
    if (s->depth[cat & 3] < 1000000 && !count_only)
        s->depth[cat & 3]++;
    if (cat == CAT_BACKEND)
        s->pyflag = 1;
    struct cost *c = costs.lookup(&id);
    if (c)
        charge(s, from, c->enter_before, c->enter_after);
    u64 id64 = bpf_get_current_pid_tgid();
    tl_emit((u32)id64, id64 >> 32, now, EV_ENTER, cat);
    return 0;
}

// Exits seen without an entry (attached mid-call) leave depth at zero.
static __always_inline int on_exit(int id, int cat, int count) {
    u64 now = bpf_ktime_get_ns();
    struct tstate *s = self_state(now);
    if (!s)
        return 0;
    if (count)
        hit(id);
    advance(s, now, RUN_ON);
    s->run = RUN_ON;
    int from = cur_cat(s) & 3;
    if (s->depth[cat & 3] > 0)
        s->depth[cat & 3]--;
    struct cost *c = costs.lookup(&id);
    if (c)
        charge(s, from, c->exit_before, c->exit_after);
    u64 id64 = bpf_get_current_pid_tgid();
    tl_emit((u32)id64, id64 >> 32, now, EV_EXIT, cat);
    return 0;
}

// A probe that only counts: its whole cost lands in the current category.
static __always_inline int on_count(int id) {
    u64 id64 = bpf_get_current_pid_tgid();
    u32 tid = (u32)id64;
    struct tstate *s = threads.lookup(&tid);
    if (!s || s->exited)
        return 0;
    hit(id);
    struct cost *c = costs.lookup(&id);
    if (c) {
        int cc = cur_cat(s) & 3;
        charge(s, cc, c->enter_before, c->enter_after);
    }
    return 0;
}

static __always_inline int emit(struct pt_regs *ctx, int id, u32 kind, int read_name) {
    u64 id64 = bpf_get_current_pid_tgid();
    u32 tgid = id64 >> 32;
    if (!targets.lookup(&tgid))
        return 0;
    on_count(id);
    struct event *e = events.ringbuf_reserve(sizeof(struct event));
    if (!e)
        return 0;
    e->ts = bpf_ktime_get_ns();
    e->tid = (u32)id64;
    e->tgid = tgid;
    e->kind = kind;
    e->cat = 0;
    e->name[0] = 0;
    if (read_name) {
        // record_function_enter_new(sret, const std::string& name, ...): name in rsi.
        char *data = 0;
        bpf_probe_read_user(&data, sizeof(data), (void *)PT_REGS_PARM2(ctx));
        bpf_probe_read_user_str(e->name, sizeof(e->name), data);
    }
    events.ringbuf_submit(e, 0);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_switch) {
    u64 now = bpf_ktime_get_ns();
    u32 prev = args->prev_pid, next = args->next_pid;
    struct tstate *s = threads.lookup(&prev);
    if (s && !s->exited && targets.lookup(&s->tgid)) {
        u32 tgid = bpf_get_current_pid_tgid() >> 32;
        if (s->tgid != tgid) {
            threads.delete(&prev);  // a forked child process, not one of our threads
        } else {
            advance(s, now, RUN_ON);
            s->run = RUN_OFF;
            tl_emit(prev, tgid, now, EV_OFF, 0);
        }
    }
    s = threads.lookup(&next);
    if (s && !s->exited && targets.lookup(&s->tgid)) {
        advance(s, now, RUN_OFF);
        s->run = RUN_ON;
        tl_emit(next, s->tgid, now, EV_ON, 0);
    }
    return 0;
}

// New threads of a target start being counted before their first probe hit.
TRACEPOINT_PROBE(sched, sched_process_fork) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (!targets.lookup(&tgid))
        return 0;
    u32 child = args->child_pid;
    int zero = 0;
    struct tstate *b = blank.lookup(&zero);
    if (!b)
        return 0;
    threads.update(&child, b);
    struct tstate *s = threads.lookup(&child);
    if (s) {
        s->tgid = tgid;
        s->last_ts = bpf_ktime_get_ns();
        s->run = RUN_OFF;
        tl_emit(child, tgid, s->last_ts, EV_NEW, 0);
    }
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tid = (u32)id;
    struct tstate *s = threads.lookup(&tid);
    if (!s || s->exited || s->tgid != (id >> 32) || !targets.lookup(&s->tgid))
        return 0;
    advance(s, bpf_ktime_get_ns(), RUN_ON);
    s->exited = 1;
    struct event *e = events.ringbuf_reserve(sizeof(struct event));
    if (e) {
        e->ts = s->last_ts;
        e->tid = tid;
        e->tgid = id >> 32;
        e->kind = EV_THREAD_EXIT;
        e->cat = 0;
        e->name[0] = 0;
        events.ringbuf_submit(e, 0);
    }
    return 0;
}

// Generated per-probe entry points follow (one function per catalog probe).
