# libtorch from the pip wheel, as an imported target, without torch's own
# CMake config: that config probes CUDA/cuDNN for a CUDA wheel and makes the
# build depend on the toolkit. The agent only needs the CPU libraries.
if(CASTSCOPE_BUILD_AGENT)
  if(NOT EXISTS "${CASTSCOPE_TORCH_DIR}/include/ATen/ATen.h")
    message(FATAL_ERROR "castscope: CASTSCOPE_TORCH_DIR='${CASTSCOPE_TORCH_DIR}' is not a torch package directory "
                        "(expected include/ATen/ATen.h under it). Run scripts/setup.sh, or pass "
                        "-DCASTSCOPE_TORCH_DIR=$(python -c 'import torch,os;print(os.path.dirname(torch.__file__))')")
  endif()
  set(CASTSCOPE_CXX11_ABI 1 CACHE STRING "torch._C._GLIBCXX_USE_CXX11_ABI of the wheel")
  add_library(castscope_torch INTERFACE)
  add_library(castscope::torch ALIAS castscope_torch)
  target_include_directories(castscope_torch SYSTEM INTERFACE
    "${CASTSCOPE_TORCH_DIR}/include"
    "${CASTSCOPE_TORCH_DIR}/include/torch/csrc/api/include")
  target_compile_definitions(castscope_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${CASTSCOPE_CXX11_ABI})
  target_link_libraries(castscope_torch INTERFACE
    "${CASTSCOPE_TORCH_DIR}/lib/libtorch_cpu.so"
    "${CASTSCOPE_TORCH_DIR}/lib/libc10.so")
  set(CASTSCOPE_TORCH_LIB_DIR "${CASTSCOPE_TORCH_DIR}/lib")
endif()
