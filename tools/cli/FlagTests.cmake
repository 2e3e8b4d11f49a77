# tools/cli/FlagTests.cmake: ringgrad_add_flag_test(), a CTest test that runs a program with a
# command line and checks its exit status and message (through expect_exit.cmake).
#
#   ringgrad_add_flag_test(fashion_mnist_flag_letters TARGET fashion_mnist ARGS "--epochs|3x" EXIT 2
#                          STDERR "fashion_mnist: --epochs expects an integer in [1, 100000], got '3x'")
#
# ARGS separates the arguments with '|'. The tests carry the label `cli`; they start no training
# (a bad flag stops a program before it reads data or builds a model), so each takes milliseconds.
set(RINGGRAD_EXPECT_EXIT_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/expect_exit.cmake)

function(ringgrad_add_flag_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TARGET;ARGS;EXIT;STDERR;STDOUT;NOT_STDERR" "")
  set(defines -D "PROGRAM=$<TARGET_FILE:${arg_TARGET}>" -D "ARGS=${arg_ARGS}" -D "EXIT=${arg_EXIT}")
  foreach(key STDERR STDOUT NOT_STDERR)
    if(DEFINED arg_${key})
      list(APPEND defines -D "${key}=${arg_${key}}")
    endif()
  endforeach()
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} ${defines} -P ${RINGGRAD_EXPECT_EXIT_SCRIPT})
  set_tests_properties(${name} PROPERTIES LABELS cli TIMEOUT 60)
endfunction()
