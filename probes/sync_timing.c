// Time blocked in CUDA synchronize calls (appended to bpf_program.c by the loader).
// A thread waiting in cudaStreamSynchronize & co. waits for the GPU to finish work,
// so this time is a lower bound of GPU-bound time when CUPTI is not available.
// Only the outermost sync call of a thread counts (cudaStreamSynchronize calls
// cuStreamSynchronize inside: both are probed).
struct sync_open_t {
    u64 ts;
    u32 id;
    u32 depth;
};
BPF_HASH(sync_open, u32, struct sync_open_t, 4096);
BPF_PERCPU_ARRAY(sync_ns, u64, NPROBES);
BPF_PERCPU_ARRAY(sync_calls, u64, NPROBES);

static __always_inline void sync_begin(int id, int cat) {
    u64 id64 = bpf_get_current_pid_tgid();
    u32 tgid = id64 >> 32, tid = (u32)id64;
    if (!targets.lookup(&tgid))
        return;
    int key = cat;
    u32 *mode = modes.lookup(&key);
    if (mode && *mode) {             // count-only: no exit probe will close the call
        sync_open.delete(&tid);
        return;
    }
    struct sync_open_t *o = sync_open.lookup(&tid);
    if (o) {
        o->depth++;
        return;
    }
    struct sync_open_t n = {};
    n.ts = bpf_ktime_get_ns();
    n.id = id;
    n.depth = 1;
    sync_open.update(&tid, &n);
}

static __always_inline void sync_end(void) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct sync_open_t *o = sync_open.lookup(&tid);
    if (!o)
        return;
    if (o->depth > 1) {
        o->depth--;
        return;
    }
    int k = o->id;
    u64 d = bpf_ktime_get_ns() - o->ts;
    u64 *v = sync_ns.lookup(&k);
    if (v)
        *v += d;
    u64 *c = sync_calls.lookup(&k);
    if (c)
        (*c)++;
    sync_open.delete(&tid);
}
