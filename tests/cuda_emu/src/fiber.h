// tests/cuda_emu/src/fiber.h: fibers -- functions with stacks of their own that the scheduler runs
// until they yield -- the emulator's CUDA threads.
//
// On x86-64 a switch is a dozen instructions of our own (save the callee-saved registers, swap stack
// pointers): swapcontext would also save the signal mask, a system call on every switch, and a block
// of GEMM switches at every __syncthreads. Elsewhere POSIX ucontext does it. Under AddressSanitizer
// every switch is announced
// (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber), or ASan would take the jump to
// another stack for a stack overflow. Stacks are mmap'd with a PROT_NONE guard page below them, so a
// kernel that overflows its stack faults instead of writing over its neighbour's.
#pragma once

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cstddef>

namespace cuda_emu {

class Stack {
 public:
  explicit Stack(size_t bytes);
  ~Stack();
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  void* bottom() const { return bottom_; }
  size_t size() const { return size_; }
  // Forgets what ASan knew about the previous fiber's frames, before a new fiber starts on it.
  void reset_for_reuse();

 private:
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  void* bottom_ = nullptr;
  size_t size_ = 0;
};

class Fiber {
 public:
  using Body = void (*)(void* arg);
  // Prepares `body(arg)` to run on `stack`; nothing runs until resume().
  void start(Stack* stack, Body body, void* arg);
  // From the scheduler: runs the fiber until it yields or its body returns.
  void resume();
  // From inside the fiber: back to the scheduler's resume().
  void yield();
  bool finished() const { return finished_; }
  Stack* stack() const { return stack_; }

 private:
  void prepare(Stack* stack, Body body, void* arg);  // the state start() sets on every platform
  static void entry(Fiber* self);
  [[noreturn]] void exit_to_scheduler();
  void switch_to_fiber();
  void switch_to_scheduler();

#if defined(__x86_64__)
  void* sp_ = nullptr;            // the fiber's saved stack pointer while it is not running
  void* scheduler_sp_ = nullptr;  // the scheduler's, while the fiber runs
#else
  static void trampoline(unsigned hi, unsigned lo);
  ucontext_t context_{};
  ucontext_t scheduler_{};
#endif
  Stack* stack_ = nullptr;
  Body body_ = nullptr;
  void* arg_ = nullptr;
  bool finished_ = false;
  // AddressSanitizer's bookkeeping of the stacks on both sides of a switch.
  void* fake_stack_ = nullptr;
  const void* scheduler_bottom_ = nullptr;
  size_t scheduler_size_ = 0;
};

}  // namespace cuda_emu
