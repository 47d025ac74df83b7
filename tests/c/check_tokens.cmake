# cmake -DGEN=tinyllm-gen -DMODEL=dir -DEXE=tllm_api_generate -DPROMPT=text -DMAX_NEW=n
#       -DTEMPERATURE=t -DTOP_P=p -DSEED=s -P check_tokens.cmake
# The numpy reference's tokens (tinyllm-gen reference --json) == the C API's, for the same
# prompt ids and sampling options.
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

execute_process(COMMAND "${EXE}" ${MAX_NEW} ${TEMPERATURE} ${TOP_P} ${SEED} ${prompt}
                OUTPUT_VARIABLE got RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} failed (${rc}): ${got}")
endif()
string(REPLACE ";" " " expected_text "${expected}")
if(NOT got STREQUAL expected_text)
  message(FATAL_ERROR "tokens differ from the reference\n  reference: ${expected_text}\n  C API:     ${got}")
endif()
list(LENGTH expected n)
message(STATUS "${n} tokens identical to the reference")
