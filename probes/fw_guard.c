// A guarded exit (probes/frameworks.py): its function (a destructor) also runs outside
// wait brackets, so it closes a Backend bracket only while a wait bracket is open. Its
// other hits only cost their trap, charged to the current category like a counting probe.
static __always_inline int fw_wait_exit(struct pt_regs *ctx, int id, int cat) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct tstate *s = threads.lookup(&tid);
    if (!s || s->exited || !targets.lookup(&s->tgid))
        return 0;
    if (s->fw.wait == 0) {
        trap_note(ctx, id, 1, 1);
        hit(id);
        struct cost *c = costs.lookup(&id);
        if (c)
            charge(s, cur_cat(s) & 3, c->exit_before, c->exit_after);
        return 0;
    }
    s->fw.wait--;
    return on_exit(ctx, id, cat, 1);
}
