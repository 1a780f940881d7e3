/* The reference for the mpi backend's figures (scripts/mpi-bench.sh): the
 * same MPI calls in a plain C loop, timed as collbench times a size (a
 * barrier, then iters calls back to back, the mean over ranks).
 * Usage: mpirun -np N ref COLLECTIVE BYTES... (float elements; iters and
 * warmup from REF_ITERS, REF_WARMUP). Prints "bytes busbw_GBps" lines.
 *
 * Like collbench, it calls MPI (from MPI_Init on) on a thread of its own,
 * not on the process's main thread. REF_MAIN_THREAD=1 runs it on the main
 * thread instead. That matters: Open MPI's MPI_Reduce_scatter_block takes
 * a temporary buffer at each call, and on the main thread glibc gives that
 * memory back to the kernel after each call (brk) and faults it in again
 * at the next, which made reduce-scatter 2-4x slower below 32 MiB. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct args {
	int argc;
	char **argv;
};

static void *run(void *p) {
	int argc = ((struct args *)p)->argc;
	char **argv = ((struct args *)p)->argv;
	MPI_Init(&argc, &argv);
	int me, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	int iters = getenv("REF_ITERS") ? atoi(getenv("REF_ITERS")) : 20;
	int warmup = getenv("REF_WARMUP") ? atoi(getenv("REF_WARMUP")) : 5;
	const char *coll = argv[1];
	for (int a = 2; a < argc; a++) {
		long bytes = atol(argv[a]);
		long count = bytes / 4; /* collbench's count: the size over the element */
		long per = count / n;   /* per rank where the size is the whole */
		double factor = 1;
		long sendb = bytes, recvb = bytes;
		if (!strcmp(coll, "allreduce")) factor = 2.0 * (n - 1) / n;
		else if (!strcmp(coll, "allgather")) { factor = (double)(n - 1) / n; sendb = per * 4; }
		else if (!strcmp(coll, "reduce-scatter")) { factor = (double)(n - 1) / n; recvb = per * 4; }
		else if (!strcmp(coll, "alltoall")) factor = (double)(n - 1) / n;
		char *s = malloc(sendb), *r = malloc(recvb);
		for (long i = 0; i < sendb / 4; i++) ((float *)s)[i] = (float)(i % 1000 + me); /* ordinary values: no denormals */
		memset(r, 0, recvb);
		double t = 0;
		for (int i = -warmup; i < iters; i++) {
			if (i == 0) { MPI_Barrier(MPI_COMM_WORLD); t = MPI_Wtime(); }
			if (!strcmp(coll, "allreduce")) MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			else if (!strcmp(coll, "allgather")) MPI_Allgather(s, per, MPI_FLOAT, r, per, MPI_FLOAT, MPI_COMM_WORLD);
			else if (!strcmp(coll, "reduce-scatter")) MPI_Reduce_scatter_block(s, r, per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			else if (!strcmp(coll, "alltoall")) MPI_Alltoall(s, per, MPI_FLOAT, r, per, MPI_FLOAT, MPI_COMM_WORLD);
			else if (!strcmp(coll, "broadcast")) {
				/* out of place, as collbench's: the root's output gets its input too */
				if (me == 0) memcpy(r, s, bytes);
				MPI_Bcast(r, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
			}
		}
		double mine = (MPI_Wtime() - t) / iters, worst;
		MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		worst /= n; /* the mean over ranks, as collbench averages by default */
		if (me == 0) printf("%ld %.3f\n", bytes, (double)bytes / worst / 1e9 * factor);
		free(s);
		free(r);
	}
	MPI_Finalize();
	return NULL;
}

int main(int argc, char **argv) {
	struct args a = {argc, argv};
	const char *m = getenv("REF_MAIN_THREAD");
	if (m && !strcmp(m, "1")) {
		run(&a);
		return 0;
	}
	pthread_t t;
	if (pthread_create(&t, NULL, run, &a) != 0) {
		fprintf(stderr, "ref: cannot start the MPI thread\n");
		return 1;
	}
	pthread_join(t, NULL);
	return 0;
}
