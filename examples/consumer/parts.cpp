// examples/consumer/parts.cpp: the program that asks for ringgrad's optional parts, as a GPU project
// would (find_package(ringgrad COMPONENTS cuda nccl gloo), then ringgrad::cuda etc.). It is built
// with EXPECTED_PARTS, the components it linked ("cuda,nccl,gloo", or some of them), and checks that
// it has exactly those: the CUDA backend, and the process-group backends "nccl" and "gloo". With
// the CUDA backend but no GPU (a build machine), CUDA devices number 0 and asking for one says so.
// Exits 1 on any failure, after printing OK on success.
#include <ringgrad/ringgrad.h>

#include <cstdio>
#include <string>

using namespace ringgrad;

namespace {

bool expects(const std::string& part) {
  const std::string parts = std::string(",") + EXPECTED_PARTS + ",";
  return parts.find("," + part + ",") != std::string::npos;
}

bool check(const char* what, bool has, bool wanted) {
  std::printf("%-16s %s\n", what, has ? "yes" : "no");
  if (has != wanted) std::fprintf(stderr, "parts: expected %s %s\n", what, wanted ? "present" : "absent");
  return has == wanted;
}

}  // namespace

int main() {
  bool ok = check("CUDA backend", built_with_cuda(), expects("cuda") || expects("nccl"));
  ok = check("backend \"nccl\"", parallel::nccl_available(), expects("nccl")) && ok;
  ok = check("backend \"gloo\"", parallel::gloo_available(), expects("gloo")) && ok;
  const std::vector<std::string> backends = parallel::registered_process_group_backends();
  std::string list;
  for (const std::string& b : backends) list += (list.empty() ? "" : ", ") + b;
  std::printf("process-group backends: %s\n", list.c_str());
  if (built_with_cuda()) {
    std::printf("CUDA devices: %d\n", cuda_device_count());
    if (cuda_device_count() == 0) {
      try {
        (void)zeros({2}, Device::cuda(0));
        std::fprintf(stderr, "parts: expected a CUDA tensor to be refused with no GPU visible\n");
        ok = false;
      } catch (const Error& e) {
        std::printf("no GPU here, as the error says: %s\n", e.what());
      }
    }
  }
  const Tensor sum = ringgrad::sum(ones({4}) * 2.0);  // the core still works beside the parts
  ok = ok && sum.item() == 8.0;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
