# check_fresh.cmake — fails when a committed generated file is stale.
#   cmake -DGEN=<generator> -DFILE=<committed file> -DOUT=<scratch> -P check_fresh.cmake
execute_process(COMMAND ${GEN} OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${GEN} failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT} ${FILE} RESULT_VARIABLE diff)
if(NOT diff EQUAL 0)
  message(FATAL_ERROR "${FILE} is stale (it differs from what ${GEN} prints now): "
                      "regenerate it with\n  ${GEN} > ${FILE}")
endif()
