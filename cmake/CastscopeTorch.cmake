# libtorch from the pip wheel, as an imported target, without torch's own
# CMake config: that config probes CUDA/cuDNN for a CUDA wheel and makes the
# build depend on the toolkit. The agent only needs the CPU libraries.
if(CASTSCOPE_BUILD_AGENT)
  # Not given (a `pip wheel .` build): the torch of the Python that builds,
  # which scikit-build-core passes as Python_EXECUTABLE.
  if(NOT CASTSCOPE_TORCH_DIR)
    if(NOT Python_EXECUTABLE)
      find_package(Python COMPONENTS Interpreter REQUIRED)
    endif()
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
      OUTPUT_VARIABLE _castscope_torch_found OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _castscope_torch_status)
    if(NOT _castscope_torch_status EQUAL 0)
      message(FATAL_ERROR "castscope: ${Python_EXECUTABLE} cannot import torch; install torch==2.14.1 there "
                          "(a wheel builds with --no-build-isolation), or pass -DCASTSCOPE_TORCH_DIR")
    endif()
    string(REPLACE "\n" ";" _castscope_torch_found "${_castscope_torch_found}")
    list(GET _castscope_torch_found 0 _castscope_torch_dir)
    list(GET _castscope_torch_found 1 _castscope_torch_abi)
    set(CASTSCOPE_TORCH_DIR "${_castscope_torch_dir}" CACHE PATH "The torch package directory of the venv (site-packages/torch)" FORCE)
    set(CASTSCOPE_CXX11_ABI "${_castscope_torch_abi}" CACHE STRING "torch._C._GLIBCXX_USE_CXX11_ABI of the wheel")
  endif()
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
