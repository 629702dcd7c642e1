# Include rules the link graph cannot see: a header-only dependency links
# nothing, so CastscopeBoundaries.cmake would miss it. Each rule greps every
# .h/.cc under a folder, headers and tests included (a target's SOURCES would
# miss headers). It runs at configure time with the link checks, and as the
# ctest castscope_include_boundaries (`cmake -P` on this file), because an
# edited include does not re-run the configure.
#
# cmake -DCASTSCOPE_SOURCE_DIR=<repository> -P cmake/CastscopeIncludeBoundaries.cmake

# Fails when a file under FOLDER includes a header under FORBIDDEN (paths from
# the repository root, as includes are written), naming the file and include.
function(castscope_forbid_includes source_dir)
  cmake_parse_arguments(ARG "" "FOLDER;FORBIDDEN;BECAUSE" "" ${ARGN})
  file(GLOB_RECURSE files "${source_dir}/${ARG_FOLDER}/*.h" "${source_dir}/${ARG_FOLDER}/*.cc")
  foreach(file IN LISTS files)
    file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]${ARG_FORBIDDEN}")
    if(includes)
      file(RELATIVE_PATH shown "${source_dir}" "${file}")
      list(GET includes 0 first)
      string(STRIP "${first}" first)
      message(FATAL_ERROR "castscope: ${shown} must not include ${ARG_FORBIDDEN} (${ARG_BECAUSE}); it has: ${first}")
    endif()
  endforeach()
endfunction()

function(castscope_check_include_boundaries source_dir)
  castscope_forbid_includes("${source_dir}" FOLDER server/src/batch FORBIDDEN server/src/store/
    BECAUSE "the store links batch, so what both need lives in batch, e.g. batch/event_limits.h")
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  castscope_check_include_boundaries("${CASTSCOPE_SOURCE_DIR}")
else()
  castscope_check_include_boundaries("${PROJECT_SOURCE_DIR}")
  add_test(NAME castscope_include_boundaries
           COMMAND ${CMAKE_COMMAND} -DCASTSCOPE_SOURCE_DIR=${PROJECT_SOURCE_DIR} -P ${CMAKE_CURRENT_LIST_FILE})
endif()
