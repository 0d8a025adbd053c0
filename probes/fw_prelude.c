// Per-framework split of Backend time (probes/frameworks.py). Prepended to bpf_program.c so
// that struct tstate can embed a struct fwsplit. Slot ids and flags are set per probe by
// the loader in probe_fw; the kernel charges Backend time to the slot of the outermost
// Backend call in progress.
#define NFW 8                  // slots per thread (power of two: indices are masked)
#define FW_CAT_BACKEND 1       // CAT_BACKEND in bpf_program.c
#define FW_CAT_PY 0            // CAT_PY
#define FW_WAIT_FLAG 0x100     // the probe opens a wait bracket, closed by a guarded exit

struct fwsplit {
    u64 ns[NFW * 2];      // [slot * 2 + (0 on CPU, 1 off CPU)] Backend time
    u64 calls[NFW];       // outermost Backend entries
    u64 trans[NFW];       // Python->Backend transitions
    u64 oh[NFW];          // calibrated probe cost that landed in the slot's Backend time
    u32 cur;              // slot of the outermost Backend call in progress (or the last one)
    u32 wait;             // wait brackets open (entries with FW_WAIT_FLAG not yet closed)
};

BPF_ARRAY(probe_fw, u32, NPROBES);

static __always_inline void fw_time(struct fwsplit *f, int cat, u64 dns, int off) {
    if (cat == FW_CAT_BACKEND)
        f->ns[(f->cur & (NFW - 1)) * 2 + (off ? 1 : 0)] += dns;
}

static __always_inline void fw_oh(struct fwsplit *f, int cat, u32 ns) {
    if (cat == FW_CAT_BACKEND)
        f->oh[f->cur & (NFW - 1)] += ns;
}

// A Backend entry: the outermost one picks the slot and counts the call (and the
// transition when it comes from Python). In count-only mode no exit will come, so no
// wait may stay open.
static __always_inline void fw_enter(struct fwsplit *f, int id, int cat, int from, int outermost,
                                     int count_only) {
    if (cat != FW_CAT_BACKEND)
        return;
    u32 *p = probe_fw.lookup(&id);
    u32 v = p ? *p : 0;
    if (count_only)
        f->wait = 0;
    else if (v & FW_WAIT_FLAG)
        f->wait++;
    if (!outermost)
        return;
    f->cur = v & (NFW - 1);
    f->calls[f->cur & (NFW - 1)]++;
    if (from == FW_CAT_PY)
        f->trans[f->cur & (NFW - 1)]++;
}
