// The JIT cast pass on graphs written by hand in torch's IR: each range-less
// cast takes the range of its first consumer in graph order, inside blocks
// and subgraphs too, and nothing but metadata changes.
#include "agent/src/context/jit_cast_lines.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <string>
#include <unordered_map>

namespace castscope {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Source;
using torch::jit::SourceRange;
using torch::jit::Value;

constexpr const char* kUserText = "h = torch.mm(a, b)\nreturn h + h\nreturn h * h\n";
constexpr size_t kUserFirstLine = 10;

const char* const kGraph = R"IR(
graph(%a : Tensor, %b : Tensor):
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %dt : int = prim::Constant[value=15]()
  %one : int = prim::Constant[value=1]()
  %ca : Tensor = aten::_autocast_to_reduced_precision(%a, %f, %t, %dt, %dt)
  %cb : Tensor = aten::_autocast_to_reduced_precision(%b, %f, %t, %dt, %dt)
  %h : Tensor = aten::mm(%ca, %cb)
  %ch : Tensor = aten::_autocast_to_full_precision(%h, %f, %t)
  %m : Tensor = aten::mul(%ch, %ch)
  %s : Tensor = aten::add(%ch, %ch, %one)
  %r : Tensor = aten::_autocast_to_full_precision(%s, %f, %t)
  return (%r, %m)
)IR";

struct ParsedGraph {
  std::shared_ptr<Graph> graph = std::make_shared<Graph>();
  std::unordered_map<std::string, Value*> values;
  std::shared_ptr<Source> user = std::make_shared<Source>(kUserText, "model.py", kUserFirstLine);

  // The parser gives each node a range into the IR text: cleared, so only
  // the ranges a test sets are there, as after JIT autocast's insertions.
  explicit ParsedGraph(const std::string& ir) {
    torch::jit::parseIR(ir, graph.get(), values);
    clear_ranges(graph->block());
  }
  static void clear_ranges(torch::jit::Block* block) {
    for (Node* node : block->nodes()) {
      node->setSourceRange(SourceRange());
      for (torch::jit::Block* inner : node->blocks()) clear_ranges(inner);
    }
  }
  Node* node(const std::string& value) { return values.at(value)->node(); }
  // The user range starting at the first occurrence of `text` in kUserText.
  SourceRange range_of(const std::string& text) const {
    const size_t start = std::string(kUserText).find(text);
    return SourceRange(user, start, start + text.size());
  }
};

size_t line_of(const Node* node) {
  const auto file_line = node->sourceRange().file_line_col();
  return file_line ? std::get<1>(*file_line) : 0;
}

TEST(JitCastLines, CastsTakeTheRangeOfTheirFirstConsumerInGraphOrder) {
  ParsedGraph parsed(kGraph);
  parsed.node("h")->setSourceRange(parsed.range_of("torch.mm(a, b)"));
  parsed.node("s")->setSourceRange(parsed.range_of("h + h"));
  parsed.node("m")->setSourceRange(parsed.range_of("h * h"));
  // The add now runs before the mul, though the mul used %ch first.
  parsed.node("s")->moveBefore(parsed.node("m"));
  const std::string before = parsed.graph->toString(/*print_source_locations=*/false);

  EXPECT_EQ(attribute_jit_casts(*parsed.graph), 3u);

  EXPECT_EQ(line_of(parsed.node("ca")), kUserFirstLine);
  EXPECT_EQ(line_of(parsed.node("cb")), kUserFirstLine);
  EXPECT_EQ(parsed.node("ca")->sourceRange().start(), parsed.node("h")->sourceRange().start());
  EXPECT_EQ(line_of(parsed.node("ch")), kUserFirstLine + 1);  // the add's line, not the mul's
  // Only returned: no consumer with a range, so it stays without one.
  EXPECT_FALSE(parsed.node("r")->sourceRange().source());
  EXPECT_EQ(parsed.graph->toString(false), before);  // metadata only: the computation is the same
}

TEST(JitCastLines, TorchStringRangesAreReplacedAndUserRangesKept) {
  ParsedGraph parsed(kGraph);
  auto torch_formula = std::make_shared<Source>("return self.float()\n", "<string>", 34);
  parsed.node("ca")->setSourceRange(SourceRange(torch_formula, 0, 6));
  parsed.node("cb")->setSourceRange(parsed.range_of("return h * h"));
  parsed.node("h")->setSourceRange(parsed.range_of("torch.mm(a, b)"));
  EXPECT_FALSE(is_user_range(parsed.node("ca")->sourceRange()));
  EXPECT_TRUE(is_user_range(parsed.node("cb")->sourceRange()));
  EXPECT_FALSE(is_user_range(parsed.node("r")->sourceRange()));
  // What JIT autocast's insertions really carry: an empty source.
  EXPECT_FALSE(is_user_range(SourceRange(std::make_shared<Source>(""), 0, 0)));

  attribute_jit_casts(*parsed.graph);

  EXPECT_EQ(line_of(parsed.node("ca")), kUserFirstLine);
  EXPECT_EQ(line_of(parsed.node("cb")), kUserFirstLine + 2);  // already the user's: left alone
}

TEST(JitCastLines, CastsInsideSubgraphsAndBlocksAreAttributed) {
  ParsedGraph inner(kGraph);
  inner.node("h")->setSourceRange(inner.range_of("torch.mm(a, b)"));
  const char* const outer_ir = R"IR(
graph(%x : Tensor, %y : Tensor, %cond : bool):
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %dt : int = prim::Constant[value=15]()
  %out : Tensor = prim::If(%cond)
    block0():
      %cx : Tensor = aten::_autocast_to_reduced_precision(%x, %f, %t, %dt, %dt)
      %p : Tensor = aten::mm(%cx, %cx)
      -> (%p)
    block1():
      -> (%y)
  return (%out)
)IR";
  ParsedGraph outer(outer_ir);
  outer.node("p")->setSourceRange(outer.range_of("h + h"));
  Node* differentiable = outer.graph->create(c10::prim::DifferentiableGraph, 0);
  differentiable->g_(c10::attr::Subgraph, inner.graph);
  outer.graph->prependNode(differentiable);

  EXPECT_EQ(attribute_jit_casts(*outer.graph), 3u);  // %cx, and %ca and %cb in the subgraph

  EXPECT_EQ(line_of(outer.node("cx")), kUserFirstLine + 1);
  EXPECT_EQ(line_of(inner.node("ca")), kUserFirstLine);
  EXPECT_EQ(line_of(inner.node("cb")), kUserFirstLine);
}

}  // namespace
}  // namespace castscope
