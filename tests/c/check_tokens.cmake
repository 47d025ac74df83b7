# cmake -DGEN=tinyllm-gen -DMODEL=dir -DEXE=program -DPROMPT=text -DMAX_NEW=n
#       -DTEMPERATURE=t -DTOP_P=p -DSEED=s [-DQEMU=qemu-system-arm -DWEIGHTS=weights.bin
#       -DPROMPT_IDS=a,b,c] -P check_tokens.cmake
# The numpy reference's tokens (tinyllm-gen reference --json) == the C API's, for the same
# prompt ids and sampling options. Host: EXE (tllm_api_generate) takes the request as arguments
# and prints the ids on one line. QEMU: EXE is the own-firmware example built with the request
# compiled in (PROMPT_IDS, checked against the reference's), printing "tok <index> <id>" lines.
execute_process(
  COMMAND "${GEN}" reference "${MODEL}" --prompt "${PROMPT}" --max-new-tokens ${MAX_NEW}
          --temperature ${TEMPERATURE} --top-p ${TOP_P} --seed ${SEED} --json
  OUTPUT_VARIABLE ref RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tinyllm-gen reference failed (${rc})")
endif()

function(json_ids doc key out_var)
  string(JSON n LENGTH "${doc}" ${key})
  set(ids)
  if(n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON id GET "${doc}" ${key} ${i})
      list(APPEND ids ${id})
    endforeach()
  endif()
  set(${out_var} ${ids} PARENT_SCOPE)
endfunction()
json_ids("${ref}" prompt_ids prompt)
json_ids("${ref}" generated_ids expected)

if(QEMU)
  string(REPLACE "," ";" compiled_in "${PROMPT_IDS}")
  if(NOT compiled_in STREQUAL prompt)
    message(FATAL_ERROR "the firmware's prompt ids (${PROMPT_IDS}) are not the reference's (${prompt})")
  endif()
  execute_process(
    COMMAND "${QEMU}" -M mps2-an500 -cpu cortex-m7 -nographic -monitor none
            -semihosting-config enable=on,target=native
            -device "loader,file=${WEIGHTS},addr=0x60000000,force-raw=on" -kernel "${EXE}"
    OUTPUT_VARIABLE console RESULT_VARIABLE rc TIMEOUT 300)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${EXE} under QEMU failed (${rc}): ${console}")
  endif()
  string(REGEX MATCHALL "tok [0-9]+ [0-9]+" lines "${console}")
  set(ids)
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "tok [0-9]+ " "" id "${line}")
    list(APPEND ids ${id})
  endforeach()
  string(REPLACE ";" " " got "${ids}")
else()
  execute_process(COMMAND "${EXE}" ${MAX_NEW} ${TEMPERATURE} ${TOP_P} ${SEED} ${prompt}
                  OUTPUT_VARIABLE got RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${EXE} failed (${rc}): ${got}")
  endif()
endif()
string(REPLACE ";" " " expected_text "${expected}")
if(NOT got STREQUAL expected_text)
  message(FATAL_ERROR "tokens differ from the reference\n  reference: ${expected_text}\n  C API:     ${got}")
endif()
list(LENGTH expected n)
message(STATUS "${n} tokens identical to the reference")
