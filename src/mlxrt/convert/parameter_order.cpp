#include "mlxrt/convert/parameter_order.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <string_view>

namespace mlxrt::convert {

namespace {

struct DeclarationOrder {
  const char* model_type;
  const char* module;  // path with list indices as '#'
  std::vector<std::string_view> children;
};

const std::vector<DeclarationOrder>& declaration_orders() {
  static const std::vector<DeclarationOrder> table{
#include "mlxrt/convert/parameter_order.inc"
  };
  return table;
}

bool is_index(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The parameter tree: each node's children in the order the family bound them.
struct Node {
  std::string name;
  std::optional<mx::array> value;  // set on leaves
  std::vector<std::unique_ptr<Node>> children;
  Node* child(const std::string& n) {
    for (auto& c : children)
      if (c->name == n) return c.get();
    children.push_back(std::make_unique<Node>(Node{n, std::nullopt, {}}));
    return children.back().get();
  }
};

class Orderer {
 public:
  explicit Orderer(const std::string& model_type) {
    for (const auto& d : declaration_orders())
      if (model_type == d.model_type) orders_[d.module] = &d.children;
  }

  void emit(Node& node, const std::string& path, const std::string& pattern, std::vector<Parameter>& out) const {
    if (node.value) out.push_back({path, *node.value});
    arrange(node.children, pattern);
    for (auto& c : node.children) {
      const bool index = is_index(c->name);
      emit(*c, path.empty() ? c->name : path + "." + c->name,
           (pattern.empty() && path.empty() ? std::string() : pattern + ".") + (index ? "#" : c->name), out);
    }
  }

 private:
  // List entries by index; named children by mlx-lm's declaration order where the table knows the
  // module, a child it does not list (e.g. a quantized layer's scales) right after the listed
  // child the family bound before it.
  void arrange(std::vector<std::unique_ptr<Node>>& children, const std::string& pattern) const {
    auto found = orders_.find(pattern);
    const std::vector<std::string_view>* order = found == orders_.end() ? nullptr : found->second;
    std::vector<std::pair<std::pair<long, long>, size_t>> keys;
    long last_rank = -1, extra = 0;
    for (size_t i = 0; i < children.size(); ++i) {
      const auto& n = children[i]->name;
      long rank = -1;
      if (is_index(n)) {
        rank = std::stol(n);
      } else if (order) {
        auto it = std::find(order->begin(), order->end(), n);
        if (it != order->end()) rank = it - order->begin();
      }
      if (rank >= 0 && !is_index(n) && order) {
        last_rank = rank;
        extra = 0;
        keys.push_back({{rank, 0}, i});
      } else if (is_index(n)) {
        keys.push_back({{rank, 0}, i});
      } else {
        keys.push_back({{last_rank, ++extra}, i});
      }
    }
    if (!order && std::none_of(children.begin(), children.end(), [](const auto& c) { return is_index(c->name); })) return;
    std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::unique_ptr<Node>> sorted;
    for (auto& [_, i] : keys) sorted.push_back(std::move(children[i]));
    children = std::move(sorted);
  }

  std::map<std::string, const std::vector<std::string_view>*> orders_;
};

}  // namespace

std::vector<Parameter> python_parameter_order(const std::string& model_type,
                                              std::vector<std::pair<std::string, mx::array>> bound) {
  Node root{"", std::nullopt, {}};
  for (auto& [name, value] : bound) {
    Node* node = &root;
    size_t start = 0;
    for (size_t dot; (dot = name.find('.', start)) != std::string::npos; start = dot + 1)
      node = node->child(name.substr(start, dot - start));
    node = node->child(name.substr(start));
    node->value = std::move(value);
  }
  std::vector<Parameter> out;
  Orderer(model_type).emit(root, "", "", out);
  return out;
}

}  // namespace mlxrt::convert
