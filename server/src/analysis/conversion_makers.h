// Who made a conversion, in the words reports use (totals.conversions_by_maker,
// the report's conversions): "autocast", "autocast_backward", "autograd" (a
// backward conversion of anything else), the maker libraries ("torchao",
// "fsdp", "transformer_engine"), and for an explicit cast whose code asked
// for it: the library whose file holds its line ("transformers"), else "user".
#pragma once

#include <string>
#include <string_view>

#include "castscope/v1/events.pb.h"

namespace castscope::collector {

// The package a file of an installed library belongs to: the path component
// after site-packages/ or dist-packages/ ("transformers" for
// .../site-packages/transformers/models/llama/modeling_llama.py, "six" for
// .../site-packages/six.py); "" for a file outside them (the user's).
std::string library_of_file(std::string_view file);

// `maker` of a conversion at a line in `file`.
std::string maker_label(v1::CastMaker maker, std::string_view file);

}  // namespace castscope::collector
