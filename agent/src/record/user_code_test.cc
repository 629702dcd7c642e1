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
