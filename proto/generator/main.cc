// protoc-gen-castscope-wire: run by protoc (--plugin=protoc-gen-castscope-wire=...
// --castscope-wire_out=DIR); see wire_generator.h.
#include <google/protobuf/compiler/plugin.h>

#include "proto/generator/wire_generator.h"

int main(int argc, char* argv[]) {
  castscope::wiregen::WireGenerator generator;
  return google::protobuf::compiler::PluginMain(argc, argv, &generator);
}
