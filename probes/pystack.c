// In-kernel Python stack sampler (probes/pystack.py). A target thread's CPython frame chain
// is read on its CPU-clock tick (at most once per sampling period) and when it blocks: the
// thread is stopped while its own frames are read, so a stack is never torn, as one read
// from outside while the thread runs is (austin drops ~15% of samples in a gym env's step).
// Only code object addresses leave the kernel; the monitor names them.
#define PYS_DEPTH 128              // frames kept per sample, innermost first
#define PYS_NONE 0xffffffff
#define PYS_WHY_TICK 0
#define PYS_WHY_BLOCK 1
#define PYS_WHY_EXEC 2               // not a sample: the process exec'd (depth 0)

struct pyinfo {                    // per target process, set by the monitor (pystack.Layout)
    u32 o_cframe;                  // PyThreadState -> _PyCFrame * (3.11, 3.12); PYS_NONE: none
    u32 o_current_frame;           // _PyCFrame (or PyThreadState) -> current _PyInterpreterFrame *
    u32 o_code;                    // _PyInterpreterFrame -> its code object
    u32 o_previous;                // _PyInterpreterFrame -> the caller's frame
    u32 o_instr;                   // _PyInterpreterFrame -> the instruction it is at (prev_instr)
    u32 pad;
};

struct pysample {
    u64 ts;
    u32 tgid;
    u32 tid;
    u16 depth;
    u8 why;                        // PYS_WHY_*
    u8 truncated;                  // 1: deeper than PYS_DEPTH, 2: a frame could not be read
    u32 decided;                   // 1: the kernel named its operation (pys_decide)
    u64 code[PYS_DEPTH];
};

BPF_HASH(pyinfo, u32, struct pyinfo, 4096);   // as targets (bpf_program.c)
BPF_HASH(pyts, u32, u64, 32768);         // tid -> its PyThreadState (the monitor finds them)
struct pylast {
    u64 tick;                      // the thread's latest tick sample
    u64 block;                     // its latest blocked sample
    u8 why;                        // which of the two came last
    u8 pad[7];
};
BPF_HASH(pylast, u32, struct pylast, 32768);
BPF_ARRAY(pycfg, u64, 2);                // [0] sampling period ns (0: off), [1] least gap of a blocked sample
BPF_ARRAY(pywake, u64, 1);               // when a decided sample last woke the reader
#define PYS_WAKE_GAP_NS 50000000ULL      // decided samples wake the reader at most this often
BPF_PERCPU_ARRAY(pystat, u64, 5);        // samples, ns spent reading, threads with no state, ring full,
                                         // ticks placed by their call site (bpf_program.c site_where)
BPF_RINGBUF_OUTPUT(pystacks, 128);
BPF_PROG_ARRAY(pys_tick_prog, 1);       // [0] pys_tick: on_tick's tail call (the loader fills it)
BPF_PROG_ARRAY(pys_switch_prog, 1);     // [0] pys_switch: sched_switch's

// What the monitor's rules make of each code object it has named: 1 + the operation id of
// the rule its frame matches, or 1 for none. A stack whose inner frames are all known up to
// the first match gets its operation here, at the instant it was read, not when the monitor
// gets to it (the monitor's thread can wait milliseconds for its interpreter's lock).
struct pycode {
    u64 code;
    u32 tgid;                      // code addresses are per process (an exec'd child is another program)
    u32 pad;
};
BPF_HASH(code_op, struct pycode, u32, 65536);
#define PYS_UNDECIDED 0xffffffff

static __always_inline void pys_count(int k, u64 n) {
    u64 *c = pystat.lookup(&k);
    if (c)
        *c += n;
}

// A thread's innermost _PyInterpreterFrame from its PyThreadState (0: none, or unreadable).
static __always_inline u64 pys_current_frame(struct pyinfo *pi, u64 ts_addr) {
    u64 p = ts_addr, frame = 0;
    if (pi->o_cframe != PYS_NONE && bpf_probe_read_user(&p, sizeof(p), (void *)(p + pi->o_cframe)) != 0)
        return 0;
    if (bpf_probe_read_user(&frame, sizeof(frame), (void *)(p + pi->o_current_frame)) != 0)
        return 0;
    return frame;
}

// Fills a sample's frames from a PyThreadState. One path through each step (no branch
// that keeps a different count), so the verifier's walk of the bounded loop stays linear.
static __always_inline void pys_walk(struct pysample *e, struct pyinfo *pi, u64 ts_addr) {
    u64 frame = pys_current_frame(pi, ts_addr);
    u32 o_code = pi->o_code, o_previous = pi->o_previous, d = 0;
    u8 truncated = 0;
    #pragma clang loop unroll(disable)
    for (int i = 0; i < PYS_DEPTH; i++) {
        if (!frame)
            break;
        u64 code = 0, prev = 0;
        if (bpf_probe_read_user(&code, sizeof(code), (void *)(frame + o_code)) != 0) {
            truncated = 2;
            frame = 0;
            break;
        }
        e->code[i] = code;
        d = i + 1;
        if (bpf_probe_read_user(&prev, sizeof(prev), (void *)(frame + o_previous)) != 0) {
            truncated = 2;
            frame = 0;
            break;
        }
        frame = prev;
    }
    e->truncated = frame ? 1 : truncated;
    e->depth = d;
}

// The operation of a sample's stack (innermost known match; 0: none), or PYS_UNDECIDED when a
// frame inside the first match is one the monitor has not named yet.
static __always_inline u32 pys_decide(struct pysample *e, u32 tgid) {
    struct pycode k = {};
    k.tgid = tgid;
    // read back, not carried over from the walk: the verifier then checks this loop once
    // rather than once for every depth the walk could stop at
    u32 depth = *(volatile u16 *)&e->depth;
    #pragma clang loop unroll(disable)
    for (int i = 0; i < PYS_DEPTH; i++) {
        if (i >= depth)
            break;
        k.code = e->code[i];
        u32 *v = code_op.lookup(&k);
        if (!v)
            return PYS_UNDECIDED;
        if (*v > 1)
            return *v - 1;
    }
    return *(volatile u8 *)&e->truncated ? PYS_UNDECIDED : 0;
}

// Where a thread is: the code of its two innermost frames (envpool's recv in its step), and the
// operation its decided samples there (blocked or tick) named (PYS_SITE_MIXED once two differed).
// Blocked samples are rate-limited (pycfg[1]); a thread that blocks more often than that (~1,250
// waits a second in envpool's step) would otherwise leave most waits to the operation the ticks
// last saw on CPU. A wait with no sample of its own takes its site's operation: two frames read,
// not a stack walk.
struct pysite {
    u64 code0;
    u64 code1;                     // 0: the innermost frame has no caller
    u32 tgid;
    u32 pad;
};
BPF_TABLE("lru_hash", struct pysite, u32, site_op, 16384);
#define PYS_SITE_MIXED 0xfffffffe

static __always_inline void pys_site_learn(struct pysample *e, u32 tgid, u32 op) {
    if (!e->depth)
        return;
    struct pysite k = {};
    k.tgid = tgid;
    k.code0 = e->code[0];
    k.code1 = e->depth > 1 ? e->code[1] : 0;
    u32 *v = site_op.lookup(&k);
    if (!v)
        site_op.update(&k, &op);
    else if (*v != op)
        *v = PYS_SITE_MIXED;       // one site, two operations: its waits keep the standing one
}

static __always_inline u32 pys_site_op(struct pyinfo *pi, u32 tgid, u32 tid, u64 now) {
    u64 *tsp = pyts.lookup(&tid);
    if (!tsp)
        return PYS_UNDECIDED;
    u64 frame = pys_current_frame(pi, *tsp), prev = 0;
    struct pysite k = {};
    k.tgid = tgid;
    if (!frame || bpf_probe_read_user(&k.code0, sizeof(k.code0), (void *)(frame + pi->o_code)) != 0 ||
        bpf_probe_read_user(&prev, sizeof(prev), (void *)(frame + pi->o_previous)) != 0)
        return PYS_UNDECIDED;
    if (prev && bpf_probe_read_user(&k.code1, sizeof(k.code1), (void *)(prev + pi->o_code)) != 0)
        return PYS_UNDECIDED;
    u32 *v = site_op.lookup(&k);
    u32 op = v && *v != PYS_SITE_MIXED ? *v : PYS_UNDECIDED;
    pys_count(1, bpf_ktime_get_ns() - now);
    return op;
}

// A thread switched out runnable (preempted): no sample, its wait site only (pys_site_op).
static __always_inline u32 pys_preempted_op(u32 tgid, u32 tid, u64 now) {
    int k0 = 0;
    u64 *period = pycfg.lookup(&k0);
    struct pyinfo *pi = pyinfo.lookup(&tgid);
    if (!period || !*period || !pi)
        return PYS_UNDECIDED;
    return pys_site_op(pi, tgid, tid, now);
}

// A sample the kernel named itself is only counted by the monitor: it needs no prompt reader,
// and a wakeup per sample (100 a second, an IPI and a switch on the reader's CPU each) cost
// the reader's thread ~2.5% of a core. It wakes the reader at most once per PYS_WAKE_GAP_NS,
// and that wakeup takes every sample queued before it. An undecided sample always wakes, and
// forces it: the ring's default wakes only a reader that has caught up, so behind one queued
// sample it would wait for the reader's poll timeout (a spawned child's operation began 30-50
// ms late, and its time with it).
static __always_inline u64 pys_wake_flags(u32 decided, u64 now) {
    int zero = 0;
    u64 *last = pywake.lookup(&zero);
    if (!decided || !last)
        return BPF_RB_FORCE_WAKEUP;
    if (now - *last < PYS_WAKE_GAP_NS)
        return BPF_RB_NO_WAKEUP;
    *last = now;
    return BPF_RB_FORCE_WAKEUP;
}

// Called from the thread's own context (its tick, or sched_switch as it blocks). Returns the
// sample's operation when the kernel could name it (else PYS_UNDECIDED: no sample, or the
// monitor decides).
static __always_inline u32 pys_sample(u32 tgid, u32 tid, u64 now, u8 why) {
    int k0 = 0, k1 = 1;
    u64 *period = pycfg.lookup(&k0);
    if (!period || !*period)
        return PYS_UNDECIDED;
    struct pyinfo *pi = pyinfo.lookup(&tgid);
    if (!pi)
        return PYS_UNDECIDED;
    u64 gap = *period;
    if (why == PYS_WHY_BLOCK) {
        u64 *g = pycfg.lookup(&k1);
        gap = g ? *g : 0;
    }
    // Ticks sample the thread's time on CPU at one period apart. A thread that blocks is
    // sampled unless its last sample was a blocked one less than the least gap ago.
    struct pylast *last = pylast.lookup(&tid);
    if (last) {
        if (why == PYS_WHY_TICK && now - last->tick < gap)
            return PYS_UNDECIDED;
        if (why == PYS_WHY_BLOCK && last->why == PYS_WHY_BLOCK && now - last->block < gap)
            return pys_site_op(pi, tgid, tid, now);     // a wait with no sample of its own
        if (why == PYS_WHY_TICK)
            last->tick = now;
        else
            last->block = now;
        last->why = why;
    } else {
        struct pylast first = {};
        first.tick = first.block = now;
        first.why = why;
        pylast.update(&tid, &first);
    }
    u64 *tsp = pyts.lookup(&tid);
    if (!tsp) {
        pys_count(2, 1);
        return PYS_UNDECIDED;
    }
    struct pysample *e = pystacks.ringbuf_reserve(sizeof(struct pysample));
    if (!e) {
        pys_count(3, 1);
        return PYS_UNDECIDED;
    }
    e->ts = now;
    e->tgid = tgid;
    e->tid = tid;
    e->why = why;
    pys_walk(e, pi, *tsp);
    u32 op = pys_decide(e, tgid);
    e->decided = op != PYS_UNDECIDED;  // the monitor only counts it
    if (e->decided)                    // a tick's too: a thread preempted there is in that op
        pys_site_learn(e, tgid, op);
    pystacks.ringbuf_submit(e, pys_wake_flags(e->decided, now));
    pys_count(0, 1);
    pys_count(1, bpf_ktime_get_ns() - now);
    return op;
}

// A followed fork: the child has the parent's memory, and its one thread the forking
// thread's PyThreadState (CPython keeps it after fork).
static __always_inline void pys_fork(u32 tgid, u32 ptid, u32 child) {
    struct pyinfo *pi = pyinfo.lookup(&tgid);
    u64 *tsp = pyts.lookup(&ptid);
    if (!pi || !tsp)
        return;
    struct pyinfo copy = *pi;
    u64 ts = *tsp;
    pyinfo.update(&child, &copy);
    pyts.update(&child, &ts);
}

// A thread exits: its sampler state goes with it, and a process's with its main thread (the
// tables are bounded; a job may fork workers all day, and a fork copies its parent's entry in).
static __always_inline void pys_exit(u32 tgid, u32 tid) {
    if (!pyinfo.lookup(&tgid))
        return;
    pyts.delete(&tid);
    pylast.delete(&tid);
    if (tid == tgid)
        pyinfo.delete(&tgid);
}

// After exec a process is another program: the monitor looks at it again.
TRACEPOINT_PROBE(sched, sched_process_exec) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32, tid = (u32)id;
    if (pyinfo.lookup(&tgid)) {
        pyinfo.delete(&tgid);
        pyts.delete(&tid);
        struct pysample *e = pystacks.ringbuf_reserve(sizeof(struct pysample));
        if (e) {                       // the monitor forgets the old program's names and reads the new one
            e->ts = bpf_ktime_get_ns();
            e->tgid = tgid;
            e->tid = tid;
            e->depth = 0;
            e->why = PYS_WHY_EXEC;
            e->truncated = 0;
            e->decided = 0;
            pystacks.ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);   // past queued samples (pys_wake_flags)
        }
    }
    return 0;
}
