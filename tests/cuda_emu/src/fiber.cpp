// tests/cuda_emu/src/fiber.cpp: fibers with guard pages and AddressSanitizer annotations.
#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDA_EMU_ASAN 1
#endif
#endif

#ifdef CUDA_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace cuda_emu {
namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "ringgrad CUDA emulator: %s\n", what);
  std::abort();
}

void start_switch(void** fake_stack_save, const void* bottom, size_t size) {
#ifdef CUDA_EMU_ASAN
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
  (void)fake_stack_save, (void)bottom, (void)size;
#endif
}

void finish_switch(void* fake_stack_save, const void** bottom_old, size_t* size_old) {
#ifdef CUDA_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
#else
  (void)fake_stack_save, (void)bottom_old, (void)size_old;
#endif
}

}  // namespace

Stack::Stack(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_ = (bytes + page - 1) / page * page;
  mapping_bytes_ = size_ + page;
  mapping_ = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping_ == MAP_FAILED) die("mmap of a fiber stack failed");
  // Stacks grow down: the guard page is the lowest one.
  if (mprotect(mapping_, page, PROT_NONE) != 0) die("mprotect of a fiber stack's guard page failed");
  bottom_ = static_cast<char*>(mapping_) + page;
}

Stack::~Stack() { munmap(mapping_, mapping_bytes_); }

void Stack::reset_for_reuse() {
#ifdef CUDA_EMU_ASAN
  // A finished fiber never unwinds its last frames (Fiber::entry, exit_to_scheduler and the switch),
  // so their redzones would stay poisoned; every deeper frame returned and unpoisoned its own. They
  // sit at the top of the stack: unpoisoning the top 16 KiB, not the whole stack, keeps a thread's
  // start cheap (a kernel of 65535 blocks starts 16 million of them).
  constexpr size_t kTop = 16 * 1024;
  const size_t n = size_ < kTop ? size_ : kTop;
  __asan_unpoison_memory_region(static_cast<char*>(bottom_) + size_ - n, n);
#endif
}

void Fiber::prepare(Stack* stack, Body body, void* arg) {
  stack_ = stack;
  body_ = body;
  arg_ = arg;
  finished_ = false;
  fake_stack_ = nullptr;
}

#if defined(__x86_64__)
// cuda_emu_switch(save, load): pushes the callee-saved registers, MXCSR and the x87 control word,
// stores the stack pointer in *save, loads `load` and pops the same from there. A new fiber's
// stack is laid out as if it had called cuda_emu_switch from cuda_emu_fiber_entry.
extern "C" void cuda_emu_switch(void** save, void* load);
extern "C" void cuda_emu_fiber_entry();
asm(R"(
  .text
  .globl cuda_emu_switch
  .type cuda_emu_switch, @function
cuda_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cuda_emu_switch, .-cuda_emu_switch

  .globl cuda_emu_fiber_entry
  .type cuda_emu_fiber_entry, @function
cuda_emu_fiber_entry:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size cuda_emu_fiber_entry, .-cuda_emu_fiber_entry
)");

void Fiber::start(Stack* stack, Body body, void* arg) {
  prepare(stack, body, arg);
  // From the top: the return address of cuda_emu_switch (into cuda_emu_fiber_entry, with a 16-byte
  // aligned stack once it has been popped), rbp, rbx, r12 = this, r13 = entry, r14, r15, and the
  // default MXCSR and x87 control word.
  auto top = (reinterpret_cast<uintptr_t>(stack->bottom()) + stack->size()) & ~uintptr_t{15};
  auto* slot = reinterpret_cast<uint64_t*>(top - 24);
  slot[0] = reinterpret_cast<uint64_t>(&cuda_emu_fiber_entry);
  slot[-1] = 0;                                            // rbp
  slot[-2] = 0;                                            // rbx
  slot[-3] = reinterpret_cast<uint64_t>(this);             // r12
  slot[-4] = reinterpret_cast<uint64_t>(&Fiber::entry);    // r13
  slot[-5] = 0;                                            // r14
  slot[-6] = 0;                                            // r15
  slot[-7] = uint64_t{0x1f80} | (uint64_t{0x037f} << 32);  // MXCSR, x87 control word
  sp_ = &slot[-7];
}

void Fiber::switch_to_fiber() { cuda_emu_switch(&scheduler_sp_, sp_); }
void Fiber::switch_to_scheduler() { cuda_emu_switch(&sp_, scheduler_sp_); }
#else
void Fiber::start(Stack* stack, Body body, void* arg) {
  prepare(stack, body, arg);
  if (getcontext(&context_) != 0) die("getcontext failed");
  context_.uc_stack.ss_sp = stack->bottom();
  context_.uc_stack.ss_size = stack->size();
  context_.uc_link = nullptr;  // the body never returns through uc_link: exit_to_scheduler() switches back
  // makecontext passes ints: the pointer goes in two halves.
  const auto self = reinterpret_cast<uintptr_t>(this);
  makecontext(&context_, reinterpret_cast<void (*)()>(&Fiber::trampoline), 2, static_cast<unsigned>(self >> 32),
              static_cast<unsigned>(self & 0xffffffffu));
}

void Fiber::trampoline(unsigned hi, unsigned lo) {
  entry(reinterpret_cast<Fiber*>((static_cast<uintptr_t>(hi) << 32) | lo));
}

void Fiber::switch_to_fiber() {
  if (swapcontext(&scheduler_, &context_) != 0) die("swapcontext failed");
}
void Fiber::switch_to_scheduler() {
  if (swapcontext(&context_, &scheduler_) != 0) die("swapcontext failed");
}
#endif

void Fiber::resume() {
  void* fake = nullptr;
  start_switch(&fake, stack_->bottom(), stack_->size());
  switch_to_fiber();
  finish_switch(fake, nullptr, nullptr);
}

void Fiber::yield() {
  start_switch(&fake_stack_, scheduler_bottom_, scheduler_size_);
  switch_to_scheduler();
  finish_switch(fake_stack_, &scheduler_bottom_, &scheduler_size_);
}

void Fiber::entry(Fiber* self) {
  finish_switch(nullptr, &self->scheduler_bottom_, &self->scheduler_size_);
  self->body_(self->arg_);
  self->exit_to_scheduler();
}

void Fiber::exit_to_scheduler() {
  finished_ = true;
  start_switch(nullptr, scheduler_bottom_, scheduler_size_);  // null: this fiber's fake stack goes away
  switch_to_scheduler();
  die("a finished fiber was resumed");
}

}  // namespace cuda_emu
