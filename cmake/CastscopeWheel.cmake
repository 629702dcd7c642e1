# What the castscope wheel holds (pyproject.toml, docs/python-package.md):
# `cmake --install --component castscope` lays out, under the wheel's
# site-packages, the package folder castscope/ with every native file beside
# the Python code, where each finds the others (_native.py, the preload shim,
# the forwarder launcher):
#   castscope/libcastscope_{agent,preload,python,policy_lint}.so
#   castscope/castscope-forwarder, castscope/castscope-collector
#   castscope/policies/*.json, castscope/ui/ (the viewer's bundle)
# The Python sources and castscope_boot/ are copied by scikit-build-core
# (wheel.packages). The rules are always defined and change no compile flag,
# so a wheel built in the developer's build/ recompiles nothing.
set(_castscope_wheel_targets castscope_agent castscope_preload castscope_policy_lint castscope_python
    castscope-forwarder castscope-collector)
# scikit-build-core passes SKBUILD on every configure it runs; read and drop
# it, so that a developer's build/ that once made a wheel is not a wheel
# build for ever after.
set(_castscope_making_wheel "${SKBUILD}")
unset(SKBUILD CACHE)
if(_castscope_making_wheel)
  # An instrumented agent (a profile step of scripts/setup.sh that did not
  # finish, in the build folder the wheel reuses) would write its profile
  # into that folder from every job that loads it.
  if(CASTSCOPE_PGO STREQUAL "GENERATE")
    message(FATAL_ERROR "castscope: this build folder holds an instrumented agent (CASTSCOPE_PGO=GENERATE, "
                        "a profile step that did not finish): run scripts/setup.sh again, or build the wheel in a fresh folder")
  endif()
  # A wheel without one of them would fail only when used.
  foreach(target IN LISTS _castscope_wheel_targets)
    if(NOT TARGET ${target})
      message(FATAL_ERROR "castscope: the wheel needs ${target}, which this configuration does not build "
                          "(gRPC, protobuf and the Python headers: the packages scripts/setup.sh installs)")
    endif()
  endforeach()
  # The wheel requires the torch of the Python building it
  # (scripts/wheel_metadata): it must be the one the agent compiles against.
  execute_process(COMMAND "${Python_EXECUTABLE}" -c "import os, torch; print(os.path.dirname(torch.__file__))"
    OUTPUT_VARIABLE _castscope_wheel_torch OUTPUT_STRIP_TRAILING_WHITESPACE)
  file(REAL_PATH "${CASTSCOPE_TORCH_DIR}" _castscope_built_torch)
  file(REAL_PATH "${_castscope_wheel_torch}" _castscope_wheel_torch)
  if(NOT _castscope_built_torch STREQUAL _castscope_wheel_torch)
    message(FATAL_ERROR "castscope: this build compiles against the torch in ${CASTSCOPE_TORCH_DIR}, but the wheel "
                        "would require the torch of ${Python_EXECUTABLE} (${_castscope_wheel_torch}); build the "
                        "wheel with the Python of the venv whose torch the build uses, or in a build folder of its own")
  endif()
else()
  foreach(target IN LISTS _castscope_wheel_targets)  # a developer's build without gRPC still configures
    if(NOT TARGET ${target})
      list(REMOVE_ITEM _castscope_wheel_targets ${target})
    endif()
  endforeach()
endif()

add_custom_target(castscope_wheel DEPENDS ${_castscope_wheel_targets})
install(TARGETS ${_castscope_wheel_targets}
  LIBRARY DESTINATION castscope COMPONENT castscope
  RUNTIME DESTINATION castscope COMPONENT castscope)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/policies/" DESTINATION castscope/policies COMPONENT castscope
  FILES_MATCHING PATTERN "*.json")
# The viewer is built by npm, not CMake: a wheel without it would serve no
# viewer, so the install stops and says how to build it.
install(CODE "
  if(NOT EXISTS \"${PROJECT_SOURCE_DIR}/ui/dist/index.html\")
    message(FATAL_ERROR \"castscope: the viewer is not built (${PROJECT_SOURCE_DIR}/ui/dist/index.html is missing); \"
                        \"run: cd ui && npm ci && npm run build\")
  endif()" COMPONENT castscope)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/ui/dist/" DESTINATION castscope/ui COMPONENT castscope)
