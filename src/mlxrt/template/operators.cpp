#include <cmath>
#include <limits>

#include "mlxrt/template/interpreter.h"
#include "mlxrt/template/text.h"

namespace mlxrt::tmpl::detail {

namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw OpError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

template <typename Op>
std::int64_t checked(Op op, std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (op(a, b, &r)) throw OpError("integer overflow");
  return r;
}
bool add_ovf(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub_ovf(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul_ovf(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_mul_overflow(a, b, r); }

Value repeat(const Value& seq, std::int64_t n, std::size_t max_size) {
  if (n <= 0) return seq.is_string() ? Value(std::string()) : make_list({}, seq.list().is_tuple);
  if (seq.is_string()) {
    if (seq.str().size() * static_cast<std::size_t>(n) > max_size || static_cast<std::size_t>(n) > max_size)
      throw OpError("string repetition exceeds the output limit");
    std::string out;
    for (std::int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  const auto& items = seq.list().items;
  if (static_cast<std::size_t>(n) > max_size || items.size() * static_cast<std::size_t>(n) > max_size / 8)
    throw OpError("list repetition exceeds the size limit");
  std::vector<Value> out;
  for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return make_list(std::move(out), seq.list().is_tuple);
}

Value int_pow(std::int64_t base, std::int64_t exp) {
  if (exp < 0) return Value(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  std::int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = checked(mul_ovf, result, base);
    exp >>= 1;
    if (exp > 0) base = checked(mul_ovf, base, base);
  }
  return Value(result);
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b, std::size_t max_size) {
  require_defined(a);
  require_defined(b);
  bool nums = a.is_number() && b.is_number();
  bool floats = nums && (a.is_float() || b.is_float());
  if (op == "+") {
    if (nums) {
      if (floats) return Value(a.as_double() + b.as_double());
      return Value(checked(add_ovf, a.as_int(), b.as_int()));
    }
    if (a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > max_size) throw OpError("string exceeds the output limit");
      if (a.markup == b.markup) {
        Value r(a.str() + b.str());
        r.markup = a.markup;
        return r;
      }
      Value r(a.markup ? a.str() + html_escape(b.str()) : html_escape(a.str()) + b.str());
      r.markup = true;
      return r;
    }
    if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple && !a.list().is_generator &&
        !b.list().is_generator) {
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return make_list(std::move(items), a.list().is_tuple);
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (!nums) unsupported(op, a, b);
    if (floats) return Value(a.as_double() - b.as_double());
    return Value(checked(sub_ovf, a.as_int(), b.as_int()));
  }
  if (op == "*") {
    if (nums) {
      if (floats) return Value(a.as_double() * b.as_double());
      return Value(checked(mul_ovf, a.as_int(), b.as_int()));
    }
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), max_size);
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), max_size);
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!nums) unsupported(op, a, b);
    if (b.as_double() == 0) throw OpError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!nums) unsupported(op, a, b);
    if (b.as_double() == 0) throw OpError("integer division or modulo by zero");
    if (floats) return Value(std::floor(a.as_double() / b.as_double()));
    std::int64_t x = a.as_int(), y = b.as_int();
    if (x == INT64_MIN && y == -1) throw OpError("integer overflow");
    std::int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Value(q);
  }
  if (op == "%") {
    if (a.is_string()) return Value(percent_format(a.str(), b));
    if (!nums) unsupported(op, a, b);
    if (b.as_double() == 0) throw OpError("integer division or modulo by zero");
    if (floats) {
      double x = a.as_double(), y = b.as_double();
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    std::int64_t x = a.as_int(), y = b.as_int();
    if (y == -1) return Value(std::int64_t{0});
    std::int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  if (op == "**") {
    if (!nums) unsupported(op, a, b);
    if (floats) return Value(std::pow(a.as_double(), b.as_double()));
    return int_pow(a.as_int(), b.as_int());
  }
  throw OpError("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    require_defined(item);
    if (!item.is_string())
      throw OpError("'in <string>' requires string as left operand, not " + type_name(item));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_dict()) return container.dict().find(item) != nullptr;
  if (container.is_list()) {
    for (const auto& v : iterate(container))
      if (equals(v, item)) return true;
    return false;
  }
  if (container.is_undefined()) return false;
  throw OpError("argument of type '" + type_name(container) + "' is not iterable");
}

}  // namespace mlxrt::tmpl::detail
