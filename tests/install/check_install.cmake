# cmake -P script: installs the build at BUILD_DIR into WORK_DIR/prefix,
# then configures, builds and runs the consumer project CONSUMER against
# it with generator GENERATOR and compiler CXX. Any step failing fails the
# test with that step's output.
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what} failed (${result}):\n${output}")
  endif()
  message(STATUS "${what}: ok\n${output}")
endfunction()
step("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
step("configure the consumer" "${CMAKE_COMMAND}" -S "${CONSUMER}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
     "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${prefix}" "-DEXPECTED_PREFIX=${prefix}")
step("build the consumer" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
step("run the consumer" "${WORK_DIR}/build/consumer")
