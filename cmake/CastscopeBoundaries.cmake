# The library boundaries of docs/architecture.md, checked on the link graph at
# configure time: a target that reaches a forbidden library through any chain
# of target_link_libraries fails the configure, naming the chain.
#
# The ASan build (CASTSCOPE_BUILD_AGENT=OFF, no libtorch on the machine's
# search paths at all) then builds and links every torch-free library and the
# collector, which proves the same from the other side.

# Sets ${out} to the targets `target` links against, directly or transitively,
# each as "name<-parent<-...<-target" so an error can show the chain.
function(_castscope_link_closure target out)
  set(pending "${target}")
  set(chains "${target}")
  set(seen "")
  while(pending)
    list(POP_FRONT pending current)
    list(POP_FRONT chains chain)
    if(current IN_LIST seen)
      continue()
    endif()
    list(APPEND seen "${current}")
    set(result_${current} "${chain}")
    if(NOT TARGET "${current}")
      continue()
    endif()
    get_target_property(aliased "${current}" ALIASED_TARGET)
    if(aliased)
      list(APPEND pending "${aliased}")
      list(APPEND chains "${aliased}<-${chain}")
      continue()
    endif()
    set(deps "")
    get_target_property(type "${current}" TYPE)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(direct "${current}" LINK_LIBRARIES)
      if(direct)
        list(APPEND deps ${direct})
      endif()
    endif()
    get_target_property(iface "${current}" INTERFACE_LINK_LIBRARIES)
    if(iface)
      list(APPEND deps ${iface})
    endif()
    foreach(dep IN LISTS deps)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" dep "${dep}")
      if(dep MATCHES "^\\$<")
        continue()
      endif()
      list(APPEND pending "${dep}")
      list(APPEND chains "${dep}<-${chain}")
    endforeach()
  endwhile()
  set(closure "")
  foreach(name IN LISTS seen)
    list(APPEND closure "${result_${name}}")
  endforeach()
  set(${out} "${closure}" PARENT_SCOPE)
endfunction()

# Fails the configure when `target` (if it exists) reaches any of FORBIDDEN,
# or a library file whose path matches one of FORBIDDEN_FILES.
function(castscope_forbid_links target)
  cmake_parse_arguments(ARG "" "" "FORBIDDEN;FORBIDDEN_FILES;BECAUSE" ${ARGN})
  if(NOT TARGET "${target}")
    return()
  endif()
  _castscope_link_closure("${target}" closure)
  foreach(entry IN LISTS closure)
    string(REGEX REPLACE "<-.*" "" name "${entry}")
    string(REPLACE "<-" " <- " shown "${entry}")
    if(name IN_LIST ARG_FORBIDDEN)
      message(FATAL_ERROR "castscope: ${target} must not link ${name} (${ARG_BECAUSE}); chain: ${shown}")
    endif()
    foreach(pattern IN LISTS ARG_FORBIDDEN_FILES)
      if(name MATCHES "${pattern}")
        message(FATAL_ERROR "castscope: ${target} must not link ${name} (${ARG_BECAUSE}); chain: ${shown}")
      endif()
    endforeach()
  endforeach()
endfunction()

set(_castscope_torch castscope_torch castscope::torch)
set(_castscope_torch_files "libtorch" "libc10")
set(_castscope_protobuf castscope_proto castscope_grpc protobuf::libprotobuf gRPC::grpc++ gRPC::grpc)
set(_castscope_agent_libs castscope_record castscope_policy castscope_encode castscope_config castscope_context castscope_dispatch
    castscope_observers castscope_agent castscope_preload castscope_python)

foreach(core castscope_log castscope_spool castscope_record castscope_policy castscope_encode castscope_config)
  castscope_forbid_links(${core}
    FORBIDDEN ${_castscope_torch} ${_castscope_protobuf}
    FORBIDDEN_FILES ${_castscope_torch_files}
    BECAUSE "the recording core is torch-free and protobuf-free: it is tested, sanitized and fuzzed without libtorch")
endforeach()

castscope_forbid_links(castscope_agent
  FORBIDDEN ${_castscope_protobuf}
  BECAUSE "libtorch exports protobuf symbols of its own; the agent writes the wire format itself")

foreach(collector castscope-collector castscope_batch castscope_store castscope_ingest castscope_analysis
                  castscope_report castscope_trace_export castscope_service castscope-forwarder castscope_spool_tail)
  castscope_forbid_links(${collector}
    FORBIDDEN ${_castscope_torch} ${_castscope_agent_libs}
    FORBIDDEN_FILES ${_castscope_torch_files}
    BECAUSE "the collector and the forwarder build and run without the agent and without libtorch")
endforeach()
