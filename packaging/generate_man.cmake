# cmake -DPROGRAM=path/to/dlaunch -DOUTPUT=dlaunch.1 -P generate_man.cmake
get_filename_component(dir ${OUTPUT} DIRECTORY)
file(MAKE_DIRECTORY ${dir})
execute_process(COMMAND ${PROGRAM} --help-man OUTPUT_FILE ${OUTPUT}.tmp RESULT_VARIABLE rc
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUTPUT}.tmp)
  message(FATAL_ERROR "${PROGRAM} --help-man failed (${rc}): ${err}")
endif()
file(RENAME ${OUTPUT}.tmp ${OUTPUT})
