#pragma once
/** The syntax tree of a parsed template: expressions and statements, each with its source position. */
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mlxrt/template/value.h"

namespace mlxrt::tmpl::detail {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    kConst, kName, kList, kTuple, kDict, kAttr, kItem, kSlice, kCall, kFilter, kTest,
    kNeg, kPos, kNot, kBinary, kCompare, kAnd, kOr, kCond, kConcat
  };
  Kind kind;
  int line = 0;
  int column = 0;
  Value constant;    // kConst
  std::string name;  // kName, kAttr attribute, kFilter/kTest name, kBinary operator
  // Operands: kList/kTuple items; kDict key,value,key,value...; kAttr/kItem object (+ index);
  // kSlice start,stop,step (null when absent); kCall callee then positional args; kFilter/kTest
  // subject (null inside a filter block) then positional args; kBinary/kAnd/kOr/kConcat the operands;
  // kCompare first operand then one per operator; kCond body, condition, else (null when absent).
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall/kFilter/kTest keyword arguments
  ExprPtr star_args;                                     // *args
  ExprPtr star_kwargs;                                   // **kwargs
  std::vector<std::string> ops;                          // kCompare operators
  bool negated = false;                                  // kTest `is not`
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when it has none
  Body body;
  bool uses_caller = false;
};

struct Stmt {
  enum class Kind {
    kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kBreak, kContinue, kWith,
    kScope
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;  // kText
  ExprPtr expr;      // kOutput value; kFor iterable; kSet value; kCallBlock call; kFilterBlock/kSetBlock filters
  ExprPtr target;    // kFor/kSet/kSetBlock target
  ExprPtr condition; // kFor loop filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (condition or null for else, body)
  Body body;         // kFor/kSetBlock/kCallBlock/kFilterBlock/kWith/kScope
  Body else_body;    // kFor
  std::shared_ptr<MacroDef> macro;  // kMacro; kCallBlock's caller
  std::vector<std::pair<ExprPtr, ExprPtr>> assignments;  // kWith
};

}  // namespace mlxrt::tmpl::detail
