# tools/cli/expect_exit.cmake: runs a program and checks its exit status and what it printed --
# how the CTest tests of the programs' command lines (examples/, bench/) check a bad flag's message.
#
#   cmake -D PROGRAM=<exe> -D ARGS="--epochs|3x" -D EXIT=2 -D STDERR="--epochs expects an integer"
#         [-D STDOUT=<text>] [-D NOT_STDERR=<text>] -P expect_exit.cmake
#
# ARGS separates the arguments with '|' (a CMake list would be split by add_test itself). STDERR,
# STDOUT and NOT_STDERR are plain text, not regular expressions: messages hold brackets and dots.
cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED PROGRAM OR NOT DEFINED EXIT)
  message(FATAL_ERROR "expect_exit.cmake: needs -D PROGRAM=... -D EXIT=...")
endif()
set(args "")
if(DEFINED ARGS AND NOT ARGS STREQUAL "")
  string(REPLACE "|" ";" args "${ARGS}")
endif()
execute_process(COMMAND ${PROGRAM} ${args} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 60)
string(REPLACE "|" " " shown "${ARGS}")
set(problems "")
if(NOT status STREQUAL EXIT)
  string(APPEND problems "expected exit status ${EXIT}, got ${status}\n")
endif()
function(expect_contains name text wanted)
  string(FIND "${text}" "${wanted}" at)
  if(at EQUAL -1)
    set(problems "${problems}expected ${name} to contain '${wanted}'\n" PARENT_SCOPE)
  endif()
endfunction()
if(DEFINED STDERR)
  expect_contains(stderr "${err}" "${STDERR}")
endif()
if(DEFINED STDOUT)
  expect_contains(stdout "${out}" "${STDOUT}")
endif()
if(DEFINED NOT_STDERR)
  string(FIND "${err}" "${NOT_STDERR}" at)
  if(NOT at EQUAL -1)
    string(APPEND problems "expected stderr not to contain '${NOT_STDERR}'\n")
  endif()
endif()
if(problems)
  message(FATAL_ERROR "${PROGRAM} ${shown}:\n${problems}--- stdout:\n${out}--- stderr:\n${err}")
endif()
