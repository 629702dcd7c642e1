// Stores of older schema versions, for the tests that open them: today's
// store taken back one migration at a time, as castscope of that version
// would have left it.
#pragma once

#include <string>

#include "server/src/status.h"

namespace castscope::collector::testing {

// Takes the store at `db` (today's schema, kSchemaVersion) back to schema
// `version` (4 or later), undoing each migration in turn.
Status downgrade_store(const std::string& db, int version);

}  // namespace castscope::collector::testing
