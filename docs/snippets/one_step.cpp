// docs/snippets/one_step.cpp: the program docs/one_step.md follows -- one training step of an MLP,
// then the backward graph that step recorded, printed node by node.
#include <iostream>
#include <string>

#include "mlp.h"

using namespace ringgrad;
using snippets::Mlp;

// [print_graph]
// Walks the graph from a node along its edges, printing one node per line.
void print_graph(const std::shared_ptr<Node>& node, int depth = 0) {
  std::cout << std::string(2 * depth, ' ') << node->name();
  if (auto* acc = dynamic_cast<AccumulateGrad*>(node.get())) std::cout << " -> .grad of a " << acc->leaf.shape();
  std::cout << '\n';
  for (const Edge& edge : node->next_edges) {
    if (edge.valid()) {
      print_graph(edge.node, depth + 1);
    } else {
      std::cout << std::string(2 * depth + 2, ' ') << "(no gradient needed)\n";
    }
  }
}
// [/print_graph]

int main() {
  Tensor x = randn({32, 784}, TensorOptions(), /*seed=*/1);
  Tensor y = snippets::labels_for(32, 10);

  // [step]
  auto model = std::make_shared<Mlp>(784, 256, 10);  // fc1.weight, fc1.bias, fc2.weight, fc2.bias
  nn::optim::SGD opt(model->parameters(), nn::optim::SGDOptions(0.1).momentum(0.9));

  Tensor logits = model->forward(x);       // linear -> relu -> linear, each op records a node
  Tensor loss = cross_entropy(logits, y);  // fused log-softmax + NLL, mean over the 32 rows
  opt.zero_grad();                         // every .grad back to undefined
  loss.backward();                         // the engine runs the graph; the four .grad are filled
  opt.step();                              // one fused sgd_step kernel per parameter
  // [/step]

  // [show_graph]
  print_graph(loss.grad_fn());
  // [/show_graph]

  snippets::expect(model->fc1->weight.grad().defined() && model->fc2->bias.grad().defined(),
                   "backward fills every parameter's .grad");
  snippets::expect(model->fc1->weight.grad().shape() == model->fc1->weight.shape(), ".grad has the parameter's shape");
  // A few more steps on the same batch must lower the loss.
  const double first = loss.item();
  for (int step = 0; step < 5; ++step) {
    Tensor l = cross_entropy(model->forward(x), y);
    opt.zero_grad();
    l.backward();
    opt.step();
  }
  const double last = cross_entropy(model->forward(x), y).item();
  snippets::expect(last < first, "the loss falls");
  std::cout << "loss " << first << " -> " << last << '\n';
  return 0;
}
