#include "agent/src/record/location_table.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace castscope {
namespace {

TEST(LocationTable, SameSiteSameIdAndZeroIsNone) {
  LocationTable table;
  EXPECT_EQ(table.get(0).kind, LocationKind::kNone);
  const Location site{LocationKind::kPython, "train.py", 10, "step", ""};
  const uint32_t id = table.intern(site);
  EXPECT_NE(id, 0u);
  EXPECT_EQ(table.intern(site), id);
  EXPECT_NE(table.intern(Location{LocationKind::kPython, "train.py", 11, "step", ""}), id);
  EXPECT_NE(table.intern(Location{LocationKind::kTorchscript, "train.py", 10, "step", ""}), id);
  Location shared_cast = site;  // a JIT cast that also feeds another line's op
  shared_cast.also_consumed_at = "train.py:12";
  EXPECT_NE(table.intern(shared_cast), id);
  EXPECT_EQ(table.get(id).file, "train.py");
  EXPECT_EQ(table.get(id).line, 10u);
  EXPECT_EQ(table.get(1u << 30).kind, LocationKind::kNone);  // unknown ids read as "none"
}

TEST(LocationTable, ConcurrentInterningAgrees) {
  LocationTable table;
  std::vector<uint32_t> ids(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) ids[t] = table.intern(Location{LocationKind::kPython, "shared.py", 1, "f", ""});
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[1], ids[2]);
  EXPECT_EQ(ids[2], ids[3]);
}

}  // namespace
}  // namespace castscope
