# A profile-guided build of the agent's per-op libraries (the autocast
# kernels, the op context, the event log, the frame reader): GCC lays out each
# function's blocks by how often a training job ran them, hot paths straight,
# error and compile-time paths out of line. Per op, about 3 points off `mm`
# and 2 off `linear` on this project's VM, where no layout from the source
# moved the time (docs/performance.md, "profile-guided").
#
# scripts/setup.sh drives the two phases in one build folder (the profile's
# files are named after the objects' paths): GENERATE builds the libraries
# instrumented, scripts/agent_profile_job.py runs under that agent and writes
# the profile into CASTSCOPE_PGO_DIR, and USE compiles them with it. A fresh
# build folder configured by hand is OFF; a folder keeps its phase in its
# cache.
set(CASTSCOPE_PGO "OFF" CACHE STRING
  "Profile-guided agent: OFF, GENERATE (instrumented, for the profile job) or USE (built with the profile)")
set_property(CACHE CASTSCOPE_PGO PROPERTY STRINGS OFF GENERATE USE)
set(CASTSCOPE_PGO_DIR "${PROJECT_BINARY_DIR}/pgo/profile" CACHE PATH
  "Where GENERATE's job writes the profile and USE reads it")
if(NOT CASTSCOPE_PGO MATCHES "^(OFF|GENERATE|USE)$")
  message(FATAL_ERROR "CASTSCOPE_PGO is '${CASTSCOPE_PGO}': one of OFF, GENERATE, USE")
endif()
if(NOT CASTSCOPE_PGO STREQUAL "OFF" AND (NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU"
                                         OR CMAKE_CXX_COMPILER_VERSION VERSION_LESS 10))
  message(FATAL_ERROR "CASTSCOPE_PGO=${CASTSCOPE_PGO} needs GCC 10 or later (-fprofile-partial-training); "
    "this build uses ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} (CASTSCOPE_PGO=0 scripts/setup.sh builds without)")
endif()

function(castscope_profile_guided target)
  if(CASTSCOPE_PGO STREQUAL "GENERATE")
    # Atomic counters: the agent records from every thread of the job.
    target_compile_options(${target} PRIVATE "-fprofile-generate=${CASTSCOPE_PGO_DIR}" -fprofile-update=prefer-atomic)
    # libgcov, for whatever links the instrumented code.
    target_link_options(${target} PUBLIC -fprofile-generate)
  elseif(CASTSCOPE_PGO STREQUAL "USE")
    # Functions the job never ran keep their -O2 code (partial training) instead
    # of being optimized for size; a source edited since the profile was taken
    # builds with the rest of it (its changed functions without), and
    # scripts/setup.sh takes a new profile on its next run. -fprofile-correction
    # because without it GCC warns "Missing counts for called function" of an
    # edited function that profiled code calls, a warning with no -W option of
    # its own, which -Werror made an error after any such edit (with it, the
    # message only goes to a dump file, if one is asked for); the atomic
    # counters leave nothing for it to correct in a profile of the sources.
    target_compile_options(${target} PRIVATE "-fprofile-use=${CASTSCOPE_PGO_DIR}" -fprofile-partial-training
      -fprofile-correction -Wno-missing-profile -Wno-coverage-mismatch)
    # Link-time optimization across the per-op libraries (the kernel, the
    # context, the event log and counters, the observer): their calls into
    # each other inline, and GCC lays out the agent's hot code as one.
    # About 4 % fewer of castscope's instructions per op, more in time
    # (docs/performance.md, "twelfth pass"). castscope_agent links them so.
    set_property(TARGET ${target} PROPERTY INTERPROCEDURAL_OPTIMIZATION ON)
  endif()
endfunction()
