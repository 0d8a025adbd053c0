/* Calibration library for `rlscope-top calibrate`.
 * Entry points are written in assembly so their first instruction is known:
 * cal_push* start with `push %rbp` (emulated by the uprobe handler), cal_ool* with
 * a RIP-relative `lea` (stepped out of line). A pair probe moves past instructions that
 * leave rsp alone (prologue.py pair_offset): cal_ool's `sub` keeps it on the `lea`.
 * cal_body measures its own time. */
#include <time.h>

static unsigned long long body_ns;

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec;
}

__attribute__((used, visibility("hidden"))) long cal_body(long k) {
    unsigned long long t = now_ns();
    volatile long x = 0;
    for (long i = 0; i < k; i++)
        x += i;
    body_ns += now_ns() - t;
    return x;
}

void cal_begin(void);
void cal_end(void);
void cal_begin_ool(void);
void cal_end_ool(void);

/* A begin/end bracket around a body timed here, so the probes' cost inside the
 * bracket can be told from the work. */
long cal_bracket(long k) {
    cal_begin();
    long x = cal_body(k);
    cal_end();
    return x;
}

long cal_bracket_ool(long k) {
    cal_begin_ool();
    long x = cal_body(k);
    cal_end_ool();
    return x;
}

unsigned long long cal_body_ns(void) { return body_ns; }
void cal_reset(void) { body_ns = 0; }

__asm__(
    ".text\n"
    ".globl cal_push\n.type cal_push,@function\ncal_push:\n"
    "  push %rbp\n  mov %rsp,%rbp\n  call cal_body\n  pop %rbp\n  ret\n.size cal_push,.-cal_push\n"
    ".globl cal_ool\n.type cal_ool,@function\ncal_ool:\n"
    "  lea 0(%rip),%rax\n  sub $8,%rsp\n  add $8,%rsp\n  push %rbp\n  mov %rsp,%rbp\n  call cal_body\n  pop %rbp\n"
    "  ret\n.size cal_ool,.-cal_ool\n"
    ".globl cal_begin\n.type cal_begin,@function\ncal_begin:\n"
    "  push %rbp\n  pop %rbp\n  ret\n.size cal_begin,.-cal_begin\n"
    ".globl cal_end\n.type cal_end,@function\ncal_end:\n"
    "  push %rbp\n  pop %rbp\n  ret\n.size cal_end,.-cal_end\n"
    ".globl cal_begin_ool\n.type cal_begin_ool,@function\ncal_begin_ool:\n"
    "  lea 0(%rip),%rax\n  ret\n.size cal_begin_ool,.-cal_begin_ool\n"
    ".globl cal_end_ool\n.type cal_end_ool,@function\ncal_end_ool:\n"
    "  lea 0(%rip),%rax\n  ret\n.size cal_end_ool,.-cal_end_ool\n");
