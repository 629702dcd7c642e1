# Conventions every castscope target shares, so each folder's CMakeLists.txt
# says only what it builds and what it links against.
#
# Includes are full paths from the repository root ("agent/src/record/event_log.h"),
# as in Perfetto: a reader sees which library a header belongs to.

# A library of one folder. Torch-free libraries also get the sanitizers of an
# ASan/UBSan build; libraries that include libtorch never do (the agent runs
# inside Python, where ASan would have to be preloaded).
function(castscope_library name kind)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES" ${ARGN})
  add_library(${name} ${kind} ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC "${PROJECT_SOURCE_DIR}")
  target_compile_features(${name} PUBLIC cxx_std_20)
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${name} PRIVATE castscope_warnings)
  if(NOT ARG_TORCH)
    target_link_libraries(${name} PUBLIC castscope_sanitizers)
  endif()
endfunction()

# A GoogleTest executable for the *_test.cc files beside a library. Without
# GTest (a machine with only the main job's packages) it creates nothing, so
# everything a test needs is said here, never on the target afterwards:
# `castscope_unit_test(x ...)` followed by `target_...(x ...)` breaks the
# main job's configure there (.ci/run configures it so on every landing).
function(castscope_unit_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  if(NOT GTest_FOUND)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE "${PROJECT_SOURCE_DIR}")
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest_main castscope_warnings castscope_sanitizers)
  target_compile_definitions(${name} PRIVATE CASTSCOPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  gtest_discover_tests(${name})
endfunction()

# Shipped agent artifacts (agent, preload shim, frame reader, forwarder) land in
# one folder: each finds the others beside itself.
set(CASTSCOPE_AGENT_OUTPUT_DIR "${PROJECT_BINARY_DIR}/agent")
function(castscope_agent_artifact name)
  set_target_properties(${name} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY "${CASTSCOPE_AGENT_OUTPUT_DIR}"
    RUNTIME_OUTPUT_DIRECTORY "${CASTSCOPE_AGENT_OUTPUT_DIR}")
  castscope_runtime_artifact(${name})
endfunction()

# castscope_runtime: what a job under `castscope run` needs (agent, preload
# shim, frame reader, policy lint, forwarder, collector) and nothing else.
# scripts/setup.sh builds only this for the main job; the test command builds
# every target (tests, benches, examples) on top.
add_custom_target(castscope_runtime)
function(castscope_runtime_artifact name)
  add_dependencies(castscope_runtime ${name})
endfunction()
