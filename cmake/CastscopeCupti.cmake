# CUPTI's headers, for GPU timing (agent/src/gpu). Headers only: the library
# is loaded with dlopen at run time, never linked. The CUDA toolkit's come
# first: the nvidia wheel's nvidia/cu13/include has cupti.h but not the crt/
# headers that cuda.h (which cupti.h includes) needs.
file(GLOB _castscope_venv_cupti LIST_DIRECTORIES true
  "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/nvidia/cu13/include")
find_path(CASTSCOPE_CUPTI_INCLUDE_DIR NAMES cupti_activity.h crt/host_defines.h
  HINTS /usr/local/cuda/include /usr/local/cuda/extras/CUPTI/include
        "${CASTSCOPE_TORCH_DIR}/../nvidia/cu13/include" ${_castscope_venv_cupti}
  NO_DEFAULT_PATH
  DOC "Folder of cupti.h and cupti_activity.h")
if(CASTSCOPE_CUPTI_INCLUDE_DIR AND NOT EXISTS "${CASTSCOPE_CUPTI_INCLUDE_DIR}/crt/host_defines.h")
  message(WARNING "castscope: ${CASTSCOPE_CUPTI_INCLUDE_DIR} has cupti.h but not crt/host_defines.h (CUDA toolkit headers)")
  set(CASTSCOPE_CUPTI_INCLUDE_DIR "" CACHE PATH "" FORCE)
endif()
if(CASTSCOPE_CUPTI_INCLUDE_DIR)
  message(STATUS "castscope: CUPTI headers in ${CASTSCOPE_CUPTI_INCLUDE_DIR}")
else()
  message(WARNING "castscope: no CUPTI headers found (/usr/local/cuda/include); "
                  "the agent builds without GPU timing and says so at run time")
endif()

# cuBLASLt's headers, for GEMM precision through its logger
# (agent/src/gpu/cublaslt_logger.h): from the nvidia wheel beside torch (the
# toolkit ships no cuBLAS here), with the toolkit's CUDA headers before them.
# Headers only: the agent only ever uses a cuBLASLt the process has loaded.
find_path(CASTSCOPE_CUBLAS_INCLUDE_DIR NAMES cublasLt.h
  HINTS "${CASTSCOPE_TORCH_DIR}/../nvidia/cu13/include" ${_castscope_venv_cupti}
  NO_DEFAULT_PATH
  DOC "Folder of cublasLt.h (the nvidia wheel's nvidia/cu13/include)")
if(CASTSCOPE_CUBLAS_INCLUDE_DIR AND CASTSCOPE_CUPTI_INCLUDE_DIR)
  set(CASTSCOPE_CUBLAS_INCLUDE_DIRS "${CASTSCOPE_CUPTI_INCLUDE_DIR}" "${CASTSCOPE_CUBLAS_INCLUDE_DIR}")
  message(STATUS "castscope: cuBLASLt headers in ${CASTSCOPE_CUBLAS_INCLUDE_DIR}")
else()
  message(WARNING "castscope: no cuBLASLt headers (the nvidia wheel's nvidia/cu13/include); "
                  "the agent builds without the cuBLASLt logger and says so at run time")
endif()
