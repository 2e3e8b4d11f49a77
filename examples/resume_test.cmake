# examples/resume_test.cmake: fashion_mnist --resume takes back the flags the checkpoint was
# trained with, and refuses a command line that contradicts them.
#
#   cmake -D PROGRAM=<fashion_mnist> -D WORK_DIR=<scratch folder> -P resume_test.cmake
#
# A tiny run (hidden 32, batch 1000: about a second per epoch on two cores) stops after epoch 1 of 2;
# `--resume` alone must then finish it with the same numbers as a run that never stopped, and
# `--resume ... --hidden 64` must fail naming both sizes. Skipped (see SKIP_REGULAR_EXPRESSION in
# examples/CMakeLists.txt) where Fashion-MNIST is not installed.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(ckpt ${WORK_DIR}/run.ckpt)
set(tiny --epochs 2 --hidden 32 --batch-size 1000 --optimizer adamw --lr 0.002 --seed 3)

function(run expected_status)
  execute_process(COMMAND ${PROGRAM} ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK_DIR} TIMEOUT 120)
  if(err MATCHES "FashionMNIST: missing")
    message("resume_test: skipped, Fashion-MNIST is not installed")
    return()
  endif()
  if(NOT status STREQUAL expected_status)
    string(REPLACE ";" " " shown "${ARGN}")
    message(FATAL_ERROR "fashion_mnist ${shown}: expected exit status ${expected_status}, got ${status}\n"
                        "--- stdout:\n${out}--- stderr:\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

# The last epoch's row: "       2    1.0870     76.16%     80.54%       95928         0 s", less the speed.
function(last_row text result)
  string(REGEX MATCH "\n +2 +[0-9.]+ +[0-9.]+% +[0-9.]+%" row "${text}")
  set(${result} "${row}" PARENT_SCOPE)
endfunction()

run(0 ${tiny})
if(NOT DEFINED out)
  return()  # skipped
endif()
last_row("${out}" uninterrupted)

run(0 ${tiny} --stop-after 1 --save ${ckpt})
# No size flag: the checkpoint says hidden 32, adamw, lr 0.002, seed 3, 2 epochs.
run(0 --resume ${ckpt})
last_row("${out}" resumed)
if(NOT out MATCHES "with the flags it was trained with" OR NOT out MATCHES "MLP 784-32-32-10, adamw lr=0.002")
  message(FATAL_ERROR "--resume did not take the checkpoint's flags:\n${out}")
endif()
if(uninterrupted STREQUAL "" OR NOT resumed STREQUAL uninterrupted)
  message(FATAL_ERROR "the resumed run's last epoch '${resumed}' differs from the uninterrupted run's '${uninterrupted}'")
endif()

# The same flag, the same value: accepted. A different one: refused, naming both values.
run(0 --resume ${ckpt} --hidden 32)
run(2 --resume ${ckpt} --hidden 64)
set(expected "fashion_mnist: --resume ${ckpt}: the checkpoint was trained with --hidden 32, this command says --hidden 64")
string(FIND "${err}" "${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "expected the message\n  ${expected}\ngot\n${err}")
endif()
