# pw_add_test(NAME <name> SOURCES <files...> [LIBS <targets...>] [LABELS unit|multiproc|gpu|slow...] [TIMEOUT s])
# The one helper that registers a Boost.Test executable with ctest and its labels.
function(pw_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} pw_test_main)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} --log_level=test_suite --report_level=short
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  # GPU suites exit 77 ("skipped: no CUDA device") where no GPU is present; ctest shows Skipped.
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
                       ENVIRONMENT "PW_SOURCE_DIR=${PROJECT_SOURCE_DIR};PW_BIN_DIR=${PROJECT_BINARY_DIR}/bin")
endfunction()
