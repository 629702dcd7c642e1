#include "agent/src/record/user_code.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace castscope {
namespace {

TEST(UserCode, TorchCastscopeFrozenAndFilelessAreNotTheUsers) {
  const std::vector<std::string> dirs = {"/venv/torch/", "/repo/agent/python/castscope/", ""};
  EXPECT_EQ(source_kind("/home/me/train.py", dirs), SourceKind::kUser);
  EXPECT_EQ(source_kind("<string>", dirs), SourceKind::kUser);  // exec'd code is the user's
  EXPECT_EQ(source_kind("<stdin>", dirs), SourceKind::kUser);
  EXPECT_EQ(source_kind("/venv/torch/nn/modules/module.py", dirs), SourceKind::kInternal);
  EXPECT_EQ(source_kind("/repo/agent/python/castscope/compile_capture.py", dirs), SourceKind::kInternal);
  EXPECT_EQ(source_kind("<frozen runpy>", dirs), SourceKind::kInternal);
  EXPECT_EQ(source_kind("", dirs), SourceKind::kInternal);
  EXPECT_EQ(source_kind("<eval_with_key>.3", dirs), SourceKind::kGenerated);
  // A directory is a prefix with its separator: a sibling is still the user's.
  EXPECT_EQ(source_kind("/venv/torchvision_local/model.py", dirs), SourceKind::kUser);
}

TEST(UserCode, MakerLibrariesAreNamedAndNotTheUsers) {
  using v1::enums::CastMaker;
  const std::vector<std::string> dirs = {"/venv/torch/"};
  EXPECT_EQ(maker_library("/venv/torchao/float8/float8_linear.py"), CastMaker::kTorchao);
  EXPECT_EQ(maker_library("/venv/torch/distributed/fsdp/_fully_shard/_fsdp_param.py"), CastMaker::kFsdp);
  EXPECT_EQ(maker_library("/venv/transformer_engine/pytorch/module/linear.py"), CastMaker::kTransformerEngine);
  EXPECT_EQ(maker_library("/venv/torch/distributed/distributed_c10d.py"), CastMaker::kUnspecified);
  EXPECT_EQ(maker_library("/venv/transformers/models/llama/modeling_llama.py"), CastMaker::kUnspecified);
  EXPECT_EQ(maker_library("/home/me/torchao_experiments.py"), CastMaker::kUnspecified);  // a directory, not a prefix
  // The line is the user's call of the library: its files are not the user's.
  EXPECT_EQ(source_kind("/venv/torchao/float8/float8_linear.py", dirs), SourceKind::kInternal);
  EXPECT_EQ(source_kind("/venv/transformers/models/llama/modeling_llama.py", dirs), SourceKind::kUser);
}

TEST(UserCode, TheProcessDirectoriesAreTorchsFromStartPlusAdded) {
  set_torch_dir("/venv-a/torch/");
  add_internal_dir("/pkg/castscope/");
  add_internal_dir("/pkg/castscope/");  // once is enough
  EXPECT_EQ(source_kind("/venv-a/torch/functional.py"), SourceKind::kInternal);
  EXPECT_EQ(source_kind("/pkg/castscope/_fx_lines.py"), SourceKind::kInternal);
  set_torch_dir("/venv-b/torch/");  // a later start replaces torch's, keeps the added ones
  EXPECT_EQ(source_kind("/venv-a/torch/functional.py"), SourceKind::kUser);
  EXPECT_EQ(source_kind("/venv-b/torch/functional.py"), SourceKind::kInternal);
  EXPECT_EQ(source_kind("/pkg/castscope/_fx_lines.py"), SourceKind::kInternal);
}

}  // namespace
}  // namespace castscope
