/// @file
/// kernels/family.h: kernel families -- how an op family's kernels are declared once and found for a
/// device kind, without a central list that every new op must edit.
///
/// A family is an abstract class of kernels that belong together (kernels/indexing.h: index_select,
/// index_add, gather, scatter_add), declared in kernels/<family>.h. Each backend implements it in one
/// file -- kernels/cpu/<family>.cpp, kernels/cuda/<family>.cu -- and registers its implementation
/// there, at start-up, with RINGGRAD_REGISTER_KERNELS. An op in core/ops asks for the family by the
/// device kind of its tensors:
///
///     const IndexingKernels& k = kernels_for<IndexingKernels>(x.device().kind, "index_select");
///     k.index_select(..., ops::stream_of(x));
///
/// So a new family is its declaration, its implementations and its tests; nothing else names it.
/// The older kernels (fill, copy, unary, binary, reduce, gemm, softmax, losses, dropout, optimizer
/// steps) are still methods of kernels::Backend, which also holds the device runtime (memory,
/// streams, events): they can move to families one at a time, as each is next touched.
///
/// Registration runs in the static initialisers of the implementation files, so the linker must keep
/// those files even though nothing calls into them by name: ringgrad::ringgrad links its archive
/// whole (CMakeLists.txt), as a static libtorch must be for the same reason. It also means a family
/// is there once main() has started, not during a program's own static initialisers (which may run
/// first): a global that calls a family's op at start-up must be made on first use instead.
#pragma once

#include <typeinfo>

#include <ringgrad/core/base/device.h>
#include <ringgrad/core/base/error.h>
#include <ringgrad/kernels/backend.h>

namespace ringgrad {
namespace kernels {

/// The implementations of one family, one per device kind. `Family` is an abstract class whose
/// static `kName` names it in messages ("indexing").
template <class Family>
class KernelRegistry {
 public:
  /// Installs `impl` as the family's kernels for `kind`. Returns true, so that it can initialise a
  /// static variable (RINGGRAD_REGISTER_KERNELS). A second registration of the same class is a second
  /// copy of the library in the process (an executable and a shared library that both link it): the
  /// first stays. A registration of another class for the same kind is a programming error (two
  /// files claiming one slot) and throws.
  static bool add(DeviceKind kind, const Family& impl) {
    const Family*& slot = impls_[static_cast<size_t>(kind)];
    if (slot != nullptr) {
      RINGGRAD_CHECK(typeid(*slot) == typeid(impl), Family::kName, " kernels: registered twice for the ",
                     kind_name(kind), " backend, by two different implementations");
      return true;
    }
    slot = &impl;
    return true;
  }

  /// The family's kernels for `kind`. Throws ringgrad::Error naming `op` when the build has no
  /// backend for the kind or no device of it is visible (backend_for's checks), or when the backend
  /// exists but does not implement this family.
  static const Family& get(DeviceKind kind, const char* op) {
    backend_for(kind, op);
    const Family* impl = impls_[static_cast<size_t>(kind)];
    RINGGRAD_CHECK(impl != nullptr, op, ": the ", kind_name(kind), " backend has no ", Family::kName,
                   " kernels in this build (a program must link ringgrad::ringgrad, and ringgrad::cuda for CUDA, "
                   "which link the libraries whole, not the archives on their own; kernels/family.h says why)");
    return *impl;
  }

 private:
  static const char* kind_name(DeviceKind kind) { return kind == DeviceKind::CPU ? "cpu" : "cuda"; }
  // Zero-initialised before any static initialiser runs, so registrations may come in any order.
  static inline const Family* impls_[2] = {};
};

/// The kernels of `Family` for the device kind of an op's tensors (KernelRegistry::get).
template <class Family>
const Family& kernels_for(DeviceKind kind, const char* op) {
  return KernelRegistry<Family>::get(kind, op);
}

}  // namespace kernels
}  // namespace ringgrad

/// Registers `Impl` (a class derived from `Family`, default-constructible) as the family's kernels for
/// device kind `kind`, once, when the program starts. Used once in each implementation file, at
/// namespace scope in the namespace that declares Impl (Impl is an unqualified name), e.g.
/// RINGGRAD_REGISTER_KERNELS(IndexingKernels, DeviceKind::CPU, CpuIndexing);
#define RINGGRAD_REGISTER_KERNELS(Family, kind, Impl)                                  \
  namespace {                                                                          \
  const Impl ringgrad_kernels_##Impl{};                                                \
  const bool ringgrad_registered_##Impl =                                              \
      ::ringgrad::kernels::KernelRegistry<Family>::add(kind, ringgrad_kernels_##Impl); \
  }                                                                                    \
  static_assert(true, "RINGGRAD_REGISTER_KERNELS is used at namespace scope, with a semicolon")
