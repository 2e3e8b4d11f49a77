// core/autograd/engine.cpp: the backward pass.
//
// 1. Discover: walk the graph from the roots and count, for each node, the edges that lead into it.
// 2. Seed: put each root's gradient into the input buffer of the root's node.
// 3. Run: a node whose count reached zero has all its gradient; apply it, add its outputs into the
//    buffers of its next nodes and decrement their counts. Gradients for the same input are summed.
// 4. Finish: run the final callbacks (DDP waits for its all-reduces there).
//
// If the graph has nodes on more than one device, step 3 runs each node on its device's worker
// thread; otherwise the caller's thread runs everything, in reverse creation order.
#include <ringgrad/core/autograd/engine.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <queue>
#include <set>
#include <unordered_map>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/autograd/node.h>
#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace {

struct GraphTask {
  bool retain_graph = false;
  std::unordered_map<Node*, int> dependencies;             // edges not yet delivered, per node
  std::unordered_map<Node*, std::vector<Tensor>> buffers;  // summed gradients, per node input
  std::mutex mutex;                                        // guards the two maps in parallel mode

  std::vector<std::function<void()>> callbacks;
  std::mutex callbacks_mutex;

  std::map<Device, DeviceActivity> activity;  // per device; guarded by `mutex` in parallel mode

  // Parallel mode only.
  int outstanding = 0;  // nodes posted to a worker and not yet finished
  std::exception_ptr error;
  std::condition_variable finished;
};

thread_local GraphTask* t_current_task = nullptr;

// Scoped: marks this thread as running `task` (for queue_callback) with grad mode off.
struct RunningTask {
  explicit RunningTask(GraphTask* task) : previous(t_current_task) { t_current_task = task; }
  ~RunningTask() { t_current_task = previous; }
  GraphTask* previous;
  NoGradGuard no_grad;  // backward formulas build no graph of their own (no double backward)
};

struct LaterFirst {  // ready nodes: the most recently created runs first
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr < b->sequence_nr;
  }
};

// Adds `grad` into node's buffer slot; returns true when the node is now ready to run.
// Callers hold task.mutex in parallel mode.
bool deliver(GraphTask& task, Node* node, int input_nr, const Tensor& grad) {
  std::vector<Tensor>& buffer = task.buffers[node];
  const auto slot = static_cast<size_t>(input_nr);  // an input's index, never negative
  if (buffer.size() <= slot) buffer.resize(slot + 1);
  if (grad.defined()) buffer[slot] = buffer[slot].defined() ? add(buffer[slot], grad) : grad;
  return --task.dependencies[node] == 0;
}

// Runs one node and returns the nodes it made ready. Buffers and counts are touched under the
// task's mutex; apply() itself runs unlocked, so nodes on different devices overlap.
std::vector<std::shared_ptr<Node>> execute(GraphTask& task, const std::shared_ptr<Node>& node, bool locked) {
  std::vector<Tensor> inputs;
  {
    std::unique_lock<std::mutex> lock(task.mutex, std::defer_lock);
    if (locked) lock.lock();
    inputs = std::move(task.buffers[node.get()]);
    task.buffers.erase(node.get());
  }
  if (inputs.size() < static_cast<size_t>(node->num_outputs)) inputs.resize(static_cast<size_t>(node->num_outputs));
  for (const Node::OutputHook& h : node->pre_hooks) {
    Tensor& grad = inputs[static_cast<size_t>(h.output_nr)];
    Tensor replaced = h.hook(grad);
    if (replaced.defined()) grad = replaced;
  }
  RINGGRAD_CHECK(!node->released, "backward: trying to backward through the graph a second time (at ", node->name(),
                 "); its saved tensors were released by the first backward. Pass retain_graph=true to the first "
                 "backward() if you need to run backward twice");
  const auto start = std::chrono::steady_clock::now();
  std::vector<Tensor> grads = node->apply(inputs);
  const auto end = std::chrono::steady_clock::now();
  if (!task.retain_graph && !dynamic_cast<AccumulateGrad*>(node.get())) node->released = true;

  std::vector<std::shared_ptr<Node>> ready;
  std::unique_lock<std::mutex> lock(task.mutex, std::defer_lock);
  if (locked) lock.lock();
  DeviceActivity& activity = task.activity[node->device];
  if (activity.nodes++ == 0) {
    activity.device = node->device;
    activity.first_start = start;
  }
  activity.last_end = end;  // nodes of one device run one after another on its worker
  activity.busy += end - start;
  for (size_t i = 0; i < node->next_edges.size(); ++i) {
    const Edge& edge = node->next_edges[i];
    if (!edge.valid()) continue;
    if (deliver(task, edge.node.get(), edge.input_nr, i < grads.size() ? grads[i] : Tensor()))
      ready.push_back(edge.node);
  }
  return ready;
}

void run_serial(GraphTask& task, std::vector<std::shared_ptr<Node>> initially_ready) {
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, LaterFirst> ready;
  for (auto& n : initially_ready) ready.push(std::move(n));
  RunningTask running(&task);
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    for (auto& next : execute(task, node, /*locked=*/false)) ready.push(std::move(next));
  }
}

void run_parallel(GraphTask& task, const std::vector<std::shared_ptr<Node>>& initially_ready) {
  // post_node is recursive through the workers: each finished node posts the nodes it made ready.
  std::function<void(std::shared_ptr<Node>)> post_node = [&task, &post_node](std::shared_ptr<Node> node) {
    post_to(node->device, [&task, &post_node, node]() mutable {
      std::vector<std::shared_ptr<Node>> ready;
      try {
        RunningTask running(&task);
        bool failed;
        {
          std::lock_guard<std::mutex> lock(task.mutex);
          failed = task.error != nullptr;
        }
        if (!failed) ready = execute(task, node, /*locked=*/true);
      } catch (...) {
        std::lock_guard<std::mutex> lock(task.mutex);
        if (!task.error) task.error = std::current_exception();
        ready.clear();
      }
      // Drop our reference before signalling: once the caller wakes, backward() has returned and
      // the graph (with its saved tensors) must be freed by the caller's thread, not later by us.
      node.reset();
      std::lock_guard<std::mutex> lock(task.mutex);
      task.outstanding += static_cast<int>(ready.size()) - 1;
      for (auto& next : ready) post_node(std::move(next));
      ready.clear();
      if (task.outstanding == 0) task.finished.notify_all();
    });
  };
  std::unique_lock<std::mutex> lock(task.mutex);
  task.outstanding = static_cast<int>(initially_ready.size());
  for (const auto& node : initially_ready) post_node(node);
  task.finished.wait(lock, [&task] { return task.outstanding == 0; });
  if (task.error) std::rethrow_exception(task.error);
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads, bool retain_graph,
                  const std::vector<std::function<void()>>& final_callbacks) {
  RINGGRAD_CHECK(roots.size() == root_grads.size(), "backward: expected one gradient per root (", roots.size(),
                 "), got ", root_grads.size());
  GraphTask task;
  task.retain_graph = retain_graph;
  task.callbacks = final_callbacks;

  // Discover the graph, counting incoming edges and noting which devices it spans.
  std::vector<Edge> root_edges;
  std::vector<Node*> stack;
  std::set<Device> devices;
  std::unordered_map<Node*, bool> seen;
  for (const Tensor& root : roots) {
    RINGGRAD_CHECK(root.defined() && root.requires_grad(),
                   "backward: expected a tensor that requires grad (an op output with a grad_fn, or a leaf with "
                   "requires_grad_()), got one that does not");
    root_edges.push_back(gradient_edge(root));
    if (!seen[root_edges.back().node.get()]) {
      seen[root_edges.back().node.get()] = true;
      stack.push_back(root_edges.back().node.get());
    }
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    devices.insert(node->device);
    task.dependencies.emplace(node, 0);
    for (const Edge& edge : node->next_edges) {
      if (!edge.valid()) continue;
      ++task.dependencies[edge.node.get()];
      if (!seen[edge.node.get()]) {
        seen[edge.node.get()] = true;
        stack.push_back(edge.node.get());
      }
    }
  }

  // Seed the roots. A root reached from another root waits for that gradient too.
  for (size_t i = 0; i < roots.size(); ++i) {
    Tensor grad = root_grads[i];
    if (!grad.defined()) {
      RINGGRAD_CHECK(roots[i].numel() == 1,
                     "backward: grad can be implicitly created only for a one-element "
                     "output; got shape ",
                     roots[i].shape(), ", so pass grad (e.g. ones_like(y)) explicitly");
      grad = ones_like(roots[i]);
    }
    RINGGRAD_CHECK(grad.shape() == roots[i].shape(), "backward: expected grad of shape ", roots[i].shape(),
                   " (the output's shape), got ", grad.shape());
    Node* node = root_edges[i].node.get();
    ++task.dependencies[node];                                   // the seed counts as one more incoming edge...
    deliver(task, node, root_edges[i].input_nr, grad.detach());  // ...delivered right away
  }
  std::vector<std::shared_ptr<Node>> ready;
  for (const Edge& e : root_edges)
    if (task.dependencies[e.node.get()] == 0) {
      ready.push_back(e.node);
      task.dependencies[e.node.get()] = -1;  // a node listed by two roots is queued once
    }

  // A backward started on a device's worker (from a hook, or inside run_on) runs serially: posting
  // nodes to the worker that is busy waiting for them would deadlock.
  if (devices.size() > 1 && current_worker_device().index < 0) {
    // Start every worker the graph needs before posting anything, so a failure to create a thread
    // surfaces here, before any node holds a reference to this stack frame.
    for (Device device : devices) run_on(device, [] {}).get();
    run_parallel(task, ready);
  } else {
    run_serial(task, std::move(ready));
  }

  // Final callbacks run on the caller's thread; they may queue more.
  RunningTask running(&task);
  for (size_t i = 0;; ++i) {
    std::function<void()> callback;
    {
      std::lock_guard<std::mutex> lock(task.callbacks_mutex);
      if (i >= task.callbacks.size()) break;
      callback = task.callbacks[i];
    }
    callback();
  }
}

void queue_callback(std::function<void()> callback) {
  RINGGRAD_CHECK(t_current_task != nullptr,
                 "queue_callback: expected to be called during backward (from a hook), but no backward is running "
                 "on this thread");
  std::lock_guard<std::mutex> lock(t_current_task->callbacks_mutex);
  t_current_task->callbacks.push_back(std::move(callback));
}

std::vector<DeviceActivity> current_backward_activity() {
  RINGGRAD_CHECK(t_current_task != nullptr,
                 "current_backward_activity: expected to be called during backward (from a hook or a callback), "
                 "but no backward is running on this thread");
  std::lock_guard<std::mutex> lock(t_current_task->mutex);
  std::vector<DeviceActivity> out;
  for (const auto& entry : t_current_task->activity) out.push_back(entry.second);
  return out;
}

}  // namespace ringgrad
