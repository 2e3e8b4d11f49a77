# examples/consumer/run.cmake: the `consumer_find_package`, `consumer_find_package_hidden` and
# `consumer_add_subdirectory` tests (cmake -P). Each builds one of the two projects beside this file
# and runs its app; any failing step fails the test.
#
#   MODE=find_package      `cmake --install` the ringgrad build in RINGGRAD_BUILD_DIR into a scratch
#                          prefix under WORK_DIR, then configure, build and run find_package/ against
#                          it. Catches a header left out of the install, a dependency the config
#                          forgets to find, or an include path that only works in-tree. The
#                          CPU-only program (ringgrad::ringgrad) must need none of CUDA's, NCCL's
#                          or Gloo's libraries; then the parts program (parts.cpp) must find, link
#                          and have exactly the parts this build has (PARTS).
#     with HIDDEN=ON       the same, run inside without_gpu_stack.sh (consumer_find_package_hidden),
#                          as on a machine without the CUDA toolkit, NCCL and Gloo: the CPU-only
#                          program must configure, build and run, and asking for the parts must
#                          fail at configure time, naming what is missing.
#   MODE=add_subdirectory  configure, build and run add_subdirectory/, which compiles ringgrad again
#                          from RINGGRAD_SOURCE_DIR (CPU only). Catches a missing ringgrad::ringgrad
#                          alias, a path that assumes ringgrad is the top-level project, and tests
#                          or benchmarks that do not stay off when it is not.
#
# Inputs (-D): MODE, WORK_DIR, GENERATOR, MAKE_PROGRAM, CXX_COMPILER, COMPILER_LAUNCHER (ccache, when the
#              parent build uses it); RINGGRAD_BUILD_DIR, BUILD_TYPE (find_package: the consumer's
#              build type, default Release) and PARTS (the parts that build has, comma-separated: some of
#              cuda,nccl,gloo) or RINGGRAD_SOURCE_DIR (add_subdirectory, always Debug at -O0).
set(required MODE WORK_DIR GENERATOR CXX_COMPILER)
if(MODE STREQUAL "find_package")
  list(APPEND required RINGGRAD_BUILD_DIR)
elseif(MODE STREQUAL "add_subdirectory")
  list(APPEND required RINGGRAD_SOURCE_DIR)
else()
  message(FATAL_ERROR "run.cmake: expected -D MODE=find_package or add_subdirectory, got '${MODE}'")
endif()
foreach(var IN LISTS required)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: expected -D ${var}=..., got nothing")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()
set(test_name consumer_${MODE})
if(HIDDEN)
  set(test_name consumer_${MODE}_hidden)
endif()
set(build ${WORK_DIR}/build)

# step(name command...): runs one command, echoes it, and stops the test if it fails.
# step_fails(name pattern command...): the same for a command that must fail, with output matching pattern.
function(step_fails name pattern)
  list(JOIN ARGN " " command_line)
  message(STATUS "${test_name}: ${name} (must fail): ${command_line}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(rc EQUAL 0 OR NOT out MATCHES "${pattern}")
    message(FATAL_ERROR "${test_name}: ${name}: expected a failure saying '${pattern}', got exit ${rc}")
  endif()
endfunction()
function(step name)
  list(JOIN ARGN " " command_line)
  message(STATUS "${test_name}: ${name}: ${command_line}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${test_name}: ${name} failed (exit ${rc})")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(configure_args -S ${CMAKE_CURRENT_LIST_DIR}/${MODE} -G ${GENERATOR}
  -D CMAKE_CXX_COMPILER=${CXX_COMPILER})
if(MAKE_PROGRAM)
  list(APPEND configure_args -D CMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(COMPILER_LAUNCHER)
  list(APPEND configure_args -D CMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER})
endif()

if(MODE STREQUAL "find_package")
  set(prefix ${WORK_DIR}/prefix)
  file(REMOVE_RECURSE ${WORK_DIR})  # a stale prefix could hide a file the install forgot
  step(install ${CMAKE_COMMAND} --install ${RINGGRAD_BUILD_DIR} --prefix ${prefix})
  set(find_args -D CMAKE_BUILD_TYPE=${BUILD_TYPE} -D CMAKE_PREFIX_PATH=${prefix}
    # Not a build tree registered in ~/.cmake/packages either.
    -D CMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -D CMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
  step(configure ${CMAKE_COMMAND} ${configure_args} -B ${build} ${find_args})
  # Only the scratch prefix may have satisfied find_package(ringgrad), not a system-wide copy.
  file(STRINGS ${build}/CMakeCache.txt found_dir REGEX "^ringgrad_DIR:")
  string(REGEX REPLACE "^ringgrad_DIR:[A-Z]+=" "" found_dir "${found_dir}")
  cmake_path(IS_PREFIX prefix "${found_dir}" NORMALIZE from_prefix)
  if(NOT from_prefix)
    message(FATAL_ERROR "${test_name}: expected ringgrad from ${prefix}, found it in '${found_dir}'")
  endif()
  step(build ${CMAKE_COMMAND} --build ${build})
  step(run ${build}/app)
  if(NOT step_output MATCHES "OK")
    message(FATAL_ERROR "${test_name}: app exited 0 but did not print OK")
  endif()
  # Nothing of them among the libraries the CPU-only program needs.
  step(libraries readelf -d ${build}/app)
  if(step_output MATCHES "(cublas|cudart|nccl|gloo|libcuda)[^ ]*\\.so")
    message(FATAL_ERROR "${test_name}: the CPU-only app needs ${CMAKE_MATCH_0}")
  endif()

  string(REPLACE "," ";" parts "${PARTS}")
  if(parts)
    # Commas, not semicolons: a ';' would split the argument in two here.
    set(parts_args ${configure_args} ${find_args} -DRINGGRAD_COMPONENTS=${PARTS})
    if(HIDDEN)  # asking for a part the machine lacks fails when the program is configured
      list(GET parts 0 first_part)
      step_fails(configure_parts "component ${first_part} not found"
        ${CMAKE_COMMAND} ${parts_args} -B ${WORK_DIR}/parts_build)
      return()
    endif()
    step(configure_parts ${CMAKE_COMMAND} ${parts_args} -B ${WORK_DIR}/parts_build)
    step(build_parts ${CMAKE_COMMAND} --build ${WORK_DIR}/parts_build)
    step(run_parts ${WORK_DIR}/parts_build/parts_app)
    if(NOT step_output MATCHES "OK")
      message(FATAL_ERROR "${test_name}: parts_app exited 0 but did not print OK")
    endif()
  endif()
  return()
else()
  # A fresh cache every run, so option defaults are really tested, but the object files stay:
  # a second run recompiles only what changed. CPU only, whatever the parent build has: this checks
  # the CMake wiring, and the CUDA code would double the time. No sanitizers either, for the same
  # reason (the parent's own tests run sanitized).
  # Debug with its flags set to -O0 alone, whatever the parent's build type: the wiring is the same in
  # every build type, the parent has already built these sources optimised, and unoptimised without
  # debug info they compile in about a third of the time (this test was the slowest of the suite).
  # It also builds the one configuration no other test does, a consumer's unoptimised build. A unity
  # build (CMake joins the sources of a target into a few files) halves the time again: the headers,
  # Eigen's above all, are parsed once per group of sources instead of once per source. Each source
  # is still compiled on its own by the parent build, which is where a missing #include shows.
  file(REMOVE ${build}/CMakeCache.txt)
  step(configure ${CMAKE_COMMAND} ${configure_args} -B ${build}
    -D CMAKE_BUILD_TYPE=Debug -D CMAKE_CXX_FLAGS_DEBUG=-O0 -D CMAKE_UNITY_BUILD=ON
    -D RINGGRAD_SOURCE_DIR=${RINGGRAD_SOURCE_DIR}
    -D RINGGRAD_CUDA=OFF)
  # Not the top-level project, so ringgrad's tests, benchmarks and examples must default to off.
  foreach(option RINGGRAD_BUILD_TESTS RINGGRAD_BUILD_BENCH RINGGRAD_BUILD_EXAMPLES)
    file(STRINGS ${build}/CMakeCache.txt value REGEX "^${option}:")
    if(NOT value STREQUAL "${option}:BOOL=OFF")
      message(FATAL_ERROR "${test_name}: expected ${option}:BOOL=OFF in ringgrad's cache, got '${value}'")
    endif()
  endforeach()
  if(NOT step_output MATCHES "ringgrad: CUDA backend OFF")
    message(FATAL_ERROR "${test_name}: expected RINGGRAD_CUDA=OFF to leave the CUDA backend out")
  endif()
endif()

step(build ${CMAKE_COMMAND} --build ${build})
step(run ${build}/app)
if(NOT step_output MATCHES "OK")
  message(FATAL_ERROR "${test_name}: app exited 0 but did not print OK")
endif()
