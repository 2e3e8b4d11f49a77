// tests/cuda_emu/loop_report_sample/kernels.cu: three stride loops for tools/loop_report.py's own
// test (never compiled): report.tsv says the first made second trips, the second ran once per
// thread, and the third is missing (its kernel never ran).
__global__ void twice(float* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) y[i] = 1;
}
__global__ void once(float* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) y[i] = 2;
}
__global__ void never(float* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; RG_STEP(i, grid_threads())) y[i] = 3;
}
