/* A tiny native "simulator" for known-split tests: spins for exactly the time asked. */
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

double sim_step(double seconds) {
    double t0 = now();
    volatile double x = 0;
    while (now() - t0 < seconds)
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
