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

TEST(LocationTable, ALineReachedThroughAMakerLibraryIsALocationOfItsOwn) {
  LocationTable table;
  Location direct{LocationKind::kPython, "train.py", 7, "step", ""};
  Location through = direct;
  through.library = v1::enums::CastMaker::kTorchao;
  const uint32_t a = table.intern(direct), b = table.intern(through);
  EXPECT_NE(a, b);
  EXPECT_EQ(table.intern(through), b);
  EXPECT_EQ(table.library_of(a), v1::enums::CastMaker::kUnspecified);
  EXPECT_EQ(table.library_of(b), v1::enums::CastMaker::kTorchao);
  EXPECT_EQ(table.library_of(0), v1::enums::CastMaker::kUnspecified);
  EXPECT_EQ(table.library_of(1u << 30), v1::enums::CastMaker::kUnspecified);
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
