# cmake/CatchAddTests.cmake: the script catch_discover_tests() runs after each build of a test
# program. It lists the program's test cases and writes one CTest add_test() per case.
#
# It replaces the copy shipped with Catch2 2.13 (tests/CMakeLists.txt points Catch.cmake at it),
# which splits the list of names with CMake's list rules: a name holding ';' became two tests, and
# one holding an unmatched '[' swallowed every name after it into a single test. Those tests then
# selected no test case and passed without running anything. Here the names are split on newlines
# only, and each test runs with --warn NoTests, so a name that selects nothing fails.
#
# Based on Catch2 2.13.10's CatchAddTests.cmake (Distributed under the OSI-approved BSD 3-Clause
# License, Copyright Kitware, Inc.); it reads the same -D variables that Catch.cmake passes.

set(prefix "${TEST_PREFIX}")
set(suffix "${TEST_SUFFIX}")
set(spec ${TEST_SPEC})
set(extra_args ${TEST_EXTRA_ARGS})
set(properties ${TEST_PROPERTIES})
set(reporter ${TEST_REPORTER})
set(output_dir ${TEST_OUTPUT_DIR})
set(output_prefix ${TEST_OUTPUT_PREFIX})
set(output_suffix ${TEST_OUTPUT_SUFFIX})

# bracket(text): text as a CMake bracket argument, which no character inside can break.
function(bracket out text)
  set(eq "=")
  while(text MATCHES "\\]${eq}\\]")
    string(APPEND eq "=")
  endwhile()
  set(${out} "[${eq}[${text}]${eq}]" PARENT_SCOPE)
endfunction()

if(NOT EXISTS "${TEST_EXECUTABLE}")
  message(FATAL_ERROR "Specified test executable '${TEST_EXECUTABLE}' does not exist")
endif()
execute_process(
  COMMAND ${TEST_EXECUTOR} "${TEST_EXECUTABLE}" ${spec} --list-test-names-only
  OUTPUT_VARIABLE output
  RESULT_VARIABLE result
  WORKING_DIRECTORY "${TEST_WORKING_DIR}")
# --list-test-names-only exits with the number of tests (mod 256, so not a reliable count); a
# signal shows up as text ("Segmentation fault").
if(NOT result MATCHES "^[0-9]+$")
  message(FATAL_ERROR "Error running test executable '${TEST_EXECUTABLE}':\n"
                      "  Result: ${result}\n  Output: ${output}\n")
elseif(output MATCHES "^[ \t\r\n]*$")
  message(WARNING "Test executable '${TEST_EXECUTABLE}' contains no tests!")
endif()

set(run_args ${extra_args} --warn NoTests)
if(reporter)
  list(APPEND run_args --reporter ${reporter})
endif()
if(output_dir AND NOT IS_ABSOLUTE "${output_dir}")
  set(output_dir "${TEST_WORKING_DIR}/${output_dir}")
endif()
if(output_dir)
  file(MAKE_DIRECTORY "${output_dir}")
endif()
set(run_args_text "")
foreach(arg IN LISTS run_args)
  bracket(arg "${arg}")
  string(APPEND run_args_text " ${arg}")
endforeach()
set(properties_text "")
foreach(p IN LISTS properties)
  bracket(p "${p}")
  string(APPEND properties_text " ${p}")
endforeach()
bracket(executable "${TEST_EXECUTABLE}")
bracket(working_dir "${TEST_WORKING_DIR}")

# Walk the output line by line with string(FIND), never through a CMake list.
set(script "")
string(APPEND output "\n")
while(NOT output STREQUAL "")
  string(FIND "${output}" "\n" eol)
  string(SUBSTRING "${output}" 0 ${eol} line)
  math(EXPR next "${eol} + 1")
  string(SUBSTRING "${output}" ${next} -1 output)
  string(REGEX REPLACE "\r$" "" line "${line}")
  if(line STREQUAL "")
    continue()
  endif()

  # The CTest name is the Catch name; the argument that selects it escapes what Catch's test-spec
  # parser would read as syntax (backslash first, or it would escape the escapes).
  set(selector "${line}")
  foreach(char "\\" "," "[" "]")
    string(REPLACE "${char}" "\\${char}" selector "${selector}")
  endforeach()
  set(out_arg "")
  if(output_dir)
    string(REGEX REPLACE "[^A-Za-z0-9_]" "_" clean "${line}")
    bracket(out_arg "${output_dir}/${output_prefix}${clean}${output_suffix}")
    set(out_arg " --out ${out_arg}")
  endif()

  bracket(name "${prefix}${line}${suffix}")
  bracket(selector "${selector}")
  string(APPEND script
    "add_test(${name} ${TEST_EXECUTOR} ${executable} ${selector}${run_args_text}${out_arg})\n"
    "set_tests_properties(${name} PROPERTIES WORKING_DIRECTORY ${working_dir}${properties_text})\n"
    "list(APPEND ${TEST_LIST} ${name})\n")
endwhile()

file(WRITE "${CTEST_FILE}" "${script}")
