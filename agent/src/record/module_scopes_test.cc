#include "agent/src/record/module_scopes.h"

#include <gtest/gtest.h>

namespace castscope {
namespace {

TEST(ModuleScopes, DeclaresModulesOnceAndParametersByTheirTensor) {
  ModuleScopes scopes;
  const uint32_t root = scopes.declare_module("");
  const uint32_t proj = scopes.declare_module("layers.0.q_proj");
  EXPECT_NE(root, 0u);
  EXPECT_NE(proj, root);
  EXPECT_EQ(scopes.declare_module("layers.0.q_proj"), proj);
  int weight = 0, bias = 0, other = 0;
  const uint32_t w = scopes.declare_parameter(proj, "weight", &weight);
  const uint32_t b = scopes.declare_parameter(proj, "bias", &bias);
  EXPECT_EQ(scopes.declare_parameter(proj, "weight", &weight), w);  // a second walk of the root
  EXPECT_EQ(scopes.parameter_of(&weight), w);
  EXPECT_EQ(scopes.parameter_of(&bias), b);
  EXPECT_EQ(scopes.parameter_of(&other), 0u);
  EXPECT_EQ(scopes.get(w).module, "layers.0.q_proj");
  EXPECT_EQ(scopes.get(w).parameter, "weight");
  EXPECT_EQ(scopes.get(proj).parameter, "");
  EXPECT_EQ(scopes.get(0).module, "");
  EXPECT_EQ(scopes.get(9999).module, "");
  EXPECT_EQ(scopes.declare_parameter(0, "weight", &other), 0u);  // no such module
  // Tied under another name (a bigger root walked later): a new scope.
  const uint32_t tied = scopes.declare_parameter(root, "embed.weight", &weight);
  EXPECT_NE(tied, w);
  EXPECT_EQ(scopes.parameter_of(&weight), tied);
}

TEST(ModuleScopes, ABackwardNodeFindsTheModuleItsForwardWasMadeIn) {
  ModuleScopes scopes;
  const uint32_t outer = scopes.declare_module("");
  const uint32_t inner = scopes.declare_module("inner");
  // outer enters at 10; inner enters at 10 and makes node 10; exits at 11; outer makes 11, 12; exits at 13.
  scopes.transition(1, 10, outer);
  scopes.transition(1, 10, inner);
  scopes.transition(1, 11, outer);
  scopes.transition(1, 13, 0);
  EXPECT_EQ(scopes.module_at(1, 9), 0u);
  EXPECT_EQ(scopes.module_at(1, 10), inner);
  EXPECT_EQ(scopes.module_at(1, 11), outer);
  EXPECT_EQ(scopes.module_at(1, 12), outer);
  EXPECT_EQ(scopes.module_at(1, 13), 0u);
  EXPECT_EQ(scopes.module_at(2, 10), 0u);  // another thread's numbers
}

}  // namespace
}  // namespace castscope
