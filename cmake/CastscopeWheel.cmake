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
set(_castscope_wheel_targets castscope_agent castscope_preload castscope_policy_lint)
foreach(optional castscope_python castscope-forwarder castscope-collector)
  if(TARGET ${optional})
    list(APPEND _castscope_wheel_targets ${optional})
  endif()
endforeach()

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
