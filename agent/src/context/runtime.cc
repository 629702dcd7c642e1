#include "agent/src/context/runtime.h"

namespace castscope {

Runtime& process_runtime() {
  static Runtime* runtime = new Runtime();
  return *runtime;
}

}  // namespace castscope
