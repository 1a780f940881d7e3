/* cpuspeed: how fast one CPU runs a fixed integer loop, over time.
 * Pins itself to the CPU given, runs chunks of a fixed dependent
 * multiply-add loop for SECONDS, and prints each chunk's duration in
 * microseconds, one per line. A steady CPU gives one narrow band; a CPU
 * that shares its core with another busy thread, or changes frequency,
 * gives stretches of slower chunks.  Usage: cpuspeed CPU SECONDS */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: cpuspeed CPU SECONDS\n");
		return 2;
	}
	int cpu = atoi(argv[1]);
	double secs = atof(argv[2]);
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0) {
		perror("sched_setaffinity");
		return 1;
	}
	volatile uint64_t sink = 0;
	uint64_t x = 12345;
	double start = now_us(), end = start + secs * 1e6;
	for (;;) {
		double t0 = now_us();
		if (t0 > end)
			break;
		for (int i = 0; i < 200000; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		sink = x;
		printf("%.1f %.2f\n", t0 - start, now_us() - t0);
	}
	return (int)(sink & 0);
}
