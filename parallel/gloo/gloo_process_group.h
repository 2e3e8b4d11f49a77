// parallel/gloo/gloo_process_group.h: ProcessGroup backend "gloo" -- Gloo's collectives on CPU tensors.
//
// Gloo is the CPU collective library PyTorch's "gloo" backend is built on (Debian's libgloo-dev,
// TCP transport). Made by init_process_group("gloo"); its own library, ringgrad::gloo
// (libringgrad_gloo.a). In a program without it, asking for "gloo" is an error that says how to get
// it. It takes CPU tensors only, and is the yardstick ringgrad's hand-written ring is measured against.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/parallel/process_group.h>

namespace ringgrad {
namespace parallel {

/// The gloo backend's settings; init_process_group fills them from the launch info.
struct GlooOptions {
  RINGGRAD_ARG(std::chrono::milliseconds, timeout){300000};       ///< each collective
  RINGGRAD_ARG(std::chrono::milliseconds, setup_timeout){60000};  ///< meeting and connecting
  RINGGRAD_ARG(std::string, master_addr) = "127.0.0.1";           ///< picks the interface to listen on
};

// This rank's group: a full mesh of Gloo TCP connections, their addresses passed through `store`
// (null only for a group of one). Defined in parallel/process_group.cpp, which every program has: it
// calls the maker the gloo library installed, or throws "not in this build" without it.
std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const GlooOptions& options);

// How the gloo library joins a program: from a static initialiser it installs its maker, which also
// registers backend "gloo" with init_process_group.
using GlooGroupMaker = std::shared_ptr<ProcessGroup> (*)(std::shared_ptr<Store> store, int rank, int size,
                                                         const GlooOptions& options);
void install_gloo(GlooGroupMaker make);

}  // namespace parallel
}  // namespace ringgrad
