# The GGUF IQ formats' lookup tables (lattice grids and sign patterns) are part of the file format;
# they are generated at build time from the gguf package of the Python environment rather than kept
# in the sources. mlxrt_gguf_iq_tables(target python) makes `target` see the generated
# "mlxrt/convert/gguf_iq_tables.h".
function(mlxrt_gguf_iq_tables target python)
  set(_dir "${CMAKE_BINARY_DIR}/generated")
  set(_header "${_dir}/mlxrt/convert/gguf_iq_tables.h")
  set(_tool "${MLXRT_SOURCE_DIR}/tools/gen_gguf_iq_tables.py")
  if(NOT TARGET mlxrt_gguf_iq_tables_header)
    # The gguf package comes with the environment's test requirements (tools/requirements-test.txt).
    execute_process(COMMAND "${python}" -c "import gguf.quants" RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "${python} cannot import the gguf package, from which the GGUF IQ tables are "
                          "generated: install tools/requirements-test.txt into that environment")
    endif()
    add_custom_command(OUTPUT "${_header}"
      COMMAND "${python}" "${_tool}" "${_header}"
      DEPENDS "${_tool}"
      COMMENT "Generating the GGUF IQ tables from the gguf package" VERBATIM)
    add_custom_target(mlxrt_gguf_iq_tables_header DEPENDS "${_header}")
  endif()
  add_dependencies(${target} mlxrt_gguf_iq_tables_header)
  target_include_directories(${target} PRIVATE "${_dir}")
endfunction()
