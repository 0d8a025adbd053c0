/* A tiny native "simulator" for known-split tests: spins for exactly the time asked. */
#define _GNU_SOURCE   /* pthread_setname_np */
#include <time.h>
#include <unistd.h>

static double secs(const struct timespec *t) { return t->tv_sec + t->tv_nsec * 1e-9; }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return secs(&t);
}

/* The calling thread's last sim_step: its own first and last clock reads (CLOCK_MONOTONIC), a
 * known answer at the library's boundary, which is the monitor's. Timed from Python around the
 * call, the binding's dispatch counts too: on the CI VM a ctypes call right after a sleep takes
 * 14-25 us, not 1 us. sim_last (never probed) copies them out: common.SimBounds. */
static __thread struct timespec last[2];

void sim_last(long out[4]) {
    out[0] = last[0].tv_sec; out[1] = last[0].tv_nsec;
    out[2] = last[1].tv_sec; out[3] = last[1].tv_nsec;
}

double sim_step(double seconds) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    last[0] = t;
    double t0 = secs(&t);
    volatile double x = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (secs(&t) - t0 >= seconds)
            break;
        for (int i = 0; i < 200; i++)
            x += i * 0.5;
    }
    last[1] = t;
    return x;
}

/* Fixed work, not fixed time: `rounds` rounds of sim_step's inner loop. A machine that slows
 * down (this VM's speed flips between two states) slows it as much as the Python and torch
 * work beside it, so a known answer's shares hold where sim_step's would move. */
double sim_work(long rounds) {
    volatile double x = 0;
    for (long k = 0; k < rounds; k++)
        for (int i = 0; i < 200; i++)
            x += i * 0.5;
    return x;
}

/* Kernel time inside a simulator call (tests/targets/kernel_in_call.py): maps `pages` fresh
 * pages and writes each (a page fault at this function's own store), does `fault_rounds` of
 * sim_work's loop, and unmaps them (a syscall from libc's munmap). sim_fault(0) does nothing. */
#include <sys/mman.h>

static long fault_rounds;

void sim_fault_rounds(long rounds) { fault_rounds = rounds; }

double sim_fault(long pages) {
    if (pages <= 0)
        return 0;
    long size = pages * 4096;
    volatile char *p = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    for (long i = 0; i < size; i += 4096)
        p[i] = 1;
    double x = sim_work(fault_rounds);
    munmap((void *)p, size);
    return x;
}

/* sim_work's twin, never probed: timed beside the probed calls, it says how fast the machine
 * ran just then (tests/targets/trap_cost.py). noipa: never folded into sim_work. */
__attribute__((noipa)) double sim_ref(long rounds) {
    volatile double x = 0;
    for (long k = 0; k < rounds; k++)
        for (int i = 0; i < 200; i++)
            x += i * 0.5;
    return x;
}

int sim_reset(void) { return 0; }

/* Dies inside a probed call: the monitor must still end cleanly and count it. */
void sim_die(double seconds) {
    sim_step(seconds);
    _exit(3);
}

/* A native worker thread that never runs Python: it steps the simulator for `seconds`
 * (as envpool's C++ workers do). Returns 0 when the thread started. */
#include <pthread.h>

static double worker_seconds, worker_step;
static volatile int worker_done;

static void *sim_worker(void *arg) {
    (void)arg;
    double t0 = now();
    while (now() - t0 < worker_seconds)
        sim_step(worker_step);
    worker_done = 1;
    return 0;
}

int sim_spawn(double seconds, double step_seconds) {
    pthread_t t;
    worker_seconds = seconds;
    worker_step = step_seconds;
    worker_done = 0;
    if (pthread_create(&t, 0, sim_worker, 0) != 0)
        return -1;
    pthread_setname_np(t, "sim-worker");
    return pthread_detach(t);
}

int sim_worker_done(void) { return worker_done; }
