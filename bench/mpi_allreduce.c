/* bench/mpi_allreduce.c: MPI_Allreduce, the reference bench_allreduce compiles and runs where Open MPI
 * is installed (mpicc, mpirun). Same sizes and method as bench_allreduce.cpp; prints
 *     row mpi <bytes> <seconds>
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int iterations_for(long long bytes) {
  long long n = (200ll << 20) / (bytes > (1 << 16) ? bytes : (1 << 16));
  return (int)(n < 5 ? 5 : n > 1000 ? 1000 : n);
}

int main(int argc, char** argv) {
  long long min_bytes = 4, max_bytes = 256ll << 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!strcmp(argv[i], "--min-bytes")) min_bytes = atoll(argv[i + 1]);
    if (!strcmp(argv[i], "--max-bytes")) max_bytes = atoll(argv[i + 1]);
  }
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (long long bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const long long count = bytes / 4 > 0 ? bytes / 4 : 1;
    float* buffer = calloc((size_t)count, sizeof(float));
    for (int i = 0; i < 5; ++i) MPI_Allreduce(MPI_IN_PLACE, buffer, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const int iters = iterations_for(bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, buffer, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double seconds = (MPI_Wtime() - start) / iters, slowest = 0;
    MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("row mpi %lld %.9g\n", count * 4, slowest);
    free(buffer);
  }
  MPI_Finalize();
  return 0;
}
