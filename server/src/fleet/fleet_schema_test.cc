#include "server/src/fleet/fleet_schema.h"

#include <gtest/gtest.h>

namespace castscope::collector::fleet {
namespace {

TEST(FleetSchema, VersionOneCreatesEveryDeclaredTablePartitioningTheTimeSeries) {
  const std::vector<std::string> migrations = migration_sql();
  ASSERT_EQ(migrations.size(), static_cast<size_t>(kFleetSchemaVersion));
  for (const schema::Table* table : pg::kTables)
    EXPECT_NE(migrations[0].find("CREATE TABLE IF NOT EXISTS " + std::string(table->name) + "("), std::string::npos)
        << table->name;
  EXPECT_NE(migrations[0].find("stale_hits bigint NOT NULL) PARTITION BY RANGE (minute);"), std::string::npos);
  EXPECT_NE(migrations[0].find(") PARTITION BY RANGE (ended_at);"), std::string::npos);
}

TEST(FleetSchema, WritersGetInsertAndTheirFunctionsOnly) {
  const std::string roles = roles_sql();
  EXPECT_EQ(roles.find("UPDATE"), std::string::npos);
  EXPECT_EQ(roles.find("DELETE"), std::string::npos);
  EXPECT_NE(roles.find("GRANT SELECT ON ALL TABLES IN SCHEMA castscope TO castscope_reader"), std::string::npos);
}

TEST(FleetSchema, SiteIdsAreStableAndTellFieldsApart) {
  EXPECT_EQ(site_id("train.py", 12, "step", "mm", "self"), site_id("train.py", 12, "step", "mm", "self"));
  EXPECT_NE(site_id("train.py", 12, "step", "mm", "self"), site_id("train.py", 12, "step", "mm", "mat2"));
  EXPECT_NE(site_id("ab", 1, "", "", ""), site_id("a", 1, "b", "", ""));  // the separator counts
  EXPECT_NE(site_id("train.py", 1, "f", "mm", "self"), site_id("train.py", 11, "f", "mm", "self"));
}

}  // namespace
}  // namespace castscope::collector::fleet
