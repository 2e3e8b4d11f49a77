// core/autograd/grad_mode.cpp: grad mode is per thread, like PyTorch's, so a worker thread running a
// backward pass (which records nothing) does not switch recording off for the user's thread.
#include <ringgrad/core/autograd/grad_mode.h>

namespace ringgrad {
namespace {
thread_local bool t_grad_enabled = true;
}

bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }

}  // namespace ringgrad
