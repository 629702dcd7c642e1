#include "server/src/analysis/conversion_makers.h"

namespace castscope::collector {

std::string library_of_file(std::string_view file) {
  for (std::string_view packages : {"/site-packages/", "/dist-packages/"}) {
    const size_t at = file.rfind(packages);
    if (at == std::string_view::npos) continue;
    std::string_view rest = file.substr(at + packages.size());
    rest = rest.substr(0, rest.find('/'));
    if (rest.ends_with(".py")) rest.remove_suffix(3);
    return std::string(rest);
  }
  return "";
}

std::string maker_label(v1::CastMaker maker, std::string_view file) {
  switch (maker) {
    case v1::CAST_MAKER_UNSPECIFIED:
    case v1::CAST_MAKER_AUTOCAST: return "autocast";
    case v1::CAST_MAKER_AUTOCAST_BACKWARD: return "autocast_backward";
    case v1::CAST_MAKER_BACKWARD: return "autograd";
    case v1::CAST_MAKER_TORCHAO: return "torchao";
    case v1::CAST_MAKER_FSDP: return "fsdp";
    case v1::CAST_MAKER_TRANSFORMER_ENGINE: return "transformer_engine";
    case v1::CAST_MAKER_EXPLICIT: {
      std::string library = library_of_file(file);
      return library.empty() ? "user" : library;
    }
    default: return "unspecified";
  }
}

}  // namespace castscope::collector
