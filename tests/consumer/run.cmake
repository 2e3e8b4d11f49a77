# tests/consumer/run.cmake: the `cmake_consumer` test (cmake -P). Installs the ringgrad build in
# RINGGRAD_BUILD_DIR into a scratch prefix under WORK_DIR, then configures, builds and runs the
# project in CONSUMER_SOURCE_DIR against it. Any failing step fails the test.
#
# Inputs (-D): RINGGRAD_BUILD_DIR, CONSUMER_SOURCE_DIR, WORK_DIR, GENERATOR, MAKE_PROGRAM,
#              CXX_COMPILER, BUILD_TYPE.
foreach(var RINGGRAD_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: expected -D ${var}=..., got nothing")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})  # a stale prefix could hide a file the install forgot

# step(name command...): runs one command, echoes it, and stops the test if it fails.
function(step name)
  list(JOIN ARGN " " command_line)
  message(STATUS "cmake_consumer: ${name}: ${command_line}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake_consumer: ${name} failed (exit ${rc})")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step(install ${CMAKE_COMMAND} --install ${RINGGRAD_BUILD_DIR} --prefix ${prefix})

set(configure_args -S ${CONSUMER_SOURCE_DIR} -B ${build} -G ${GENERATOR}
  -D CMAKE_BUILD_TYPE=${BUILD_TYPE}
  -D CMAKE_CXX_COMPILER=${CXX_COMPILER}
  -D CMAKE_PREFIX_PATH=${prefix}
  # Not a build tree registered in ~/.cmake/packages either.
  -D CMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -D CMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(MAKE_PROGRAM)
  list(APPEND configure_args -D CMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
step(configure ${CMAKE_COMMAND} ${configure_args})
# Only the scratch prefix may have satisfied find_package(ringgrad), not a system-wide copy.
file(STRINGS ${build}/CMakeCache.txt found_dir REGEX "^ringgrad_DIR:")
string(REGEX REPLACE "^ringgrad_DIR:[A-Z]+=" "" found_dir "${found_dir}")
cmake_path(IS_PREFIX prefix "${found_dir}" NORMALIZE from_prefix)
if(NOT from_prefix)
  message(FATAL_ERROR "cmake_consumer: expected ringgrad from ${prefix}, found it in '${found_dir}'")
endif()
step(build ${CMAKE_COMMAND} --build ${build})
step(run ${build}/app)
if(NOT step_output MATCHES "OK")
  message(FATAL_ERROR "cmake_consumer: app exited 0 but did not print OK")
endif()
