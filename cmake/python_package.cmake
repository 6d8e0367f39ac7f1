# The Python package `mlxrt` (python/): mlx-lm's Python API over the C++ core, as the extension
# module mlxrt._core plus the pure-Python files of python/mlxrt.
#
# mlx.core.array objects cross between this module and the mlx wheel without a copy only when both
# use the same nanobind internals (the wheel's module is a nanobind module; nanobind shares bound
# types between modules whose internals key matches): NANOBIND_VERSION in versions.env is the
# nanobind whose ABI tag ("_a1_v22") the pinned mlx wheel carries, and the wheel's module is built
# in nanobind domain "mlx" (its key ends in "_mlx__"), so this module joins that domain. Both link
# the same libmlx.so.
#
# Outputs: ${CMAKE_BINARY_DIR}/python/mlxrt (the package, importable with that folder on sys.path);
# under scikit-build-core (`pip install .`) the package is installed into the wheel instead.
set(Python_EXECUTABLE "${MLXRT_PYTHON}")
find_package(Python 3.10 REQUIRED COMPONENTS Interpreter Development.Module)
if(NOT nanobind_DIR)
  execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
    OUTPUT_VARIABLE nanobind_DIR OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(WARNING "nanobind ${NANOBIND_VERSION} is not installed for ${Python_EXECUTABLE}, so the Python "
                    "package mlxrt is not built (its tests fail): run `make` (tools/setup/install-python-env.sh "
                    "installs it), or configure with -DMLXRT_PYTHON_PACKAGE=OFF")
    return()
  endif()
endif()
find_package(nanobind ${NANOBIND_VERSION} EXACT CONFIG REQUIRED)

# The bindings reuse two CLI sources (mlxrt_cli_shared): how the CLI loads a session, counts
# mlx-lm's construction draws and renders chat templates.
nanobind_add_module(mlxrt_python NB_STATIC NOMINSIZE NOSTRIP NB_DOMAIN mlx python/bindings.cpp)
target_link_libraries(mlxrt_python PRIVATE mlxrt_cli_shared)
set_target_properties(mlxrt_python PROPERTIES
  OUTPUT_NAME _core
  LIBRARY_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/python/mlxrt"
  # Installed next to the mlx wheel: site-packages/mlxrt/_core*.so finds site-packages/mlx/lib.
  INSTALL_RPATH "$ORIGIN/../mlx/lib")

file(GLOB_RECURSE _py_files CONFIGURE_DEPENDS RELATIVE "${CMAKE_SOURCE_DIR}/python/mlxrt"
  "${CMAKE_SOURCE_DIR}/python/mlxrt/*.py" "${CMAKE_SOURCE_DIR}/python/mlxrt/*.pyi"
  "${CMAKE_SOURCE_DIR}/python/mlxrt/py.typed")
foreach(_f IN LISTS _py_files)
  configure_file("python/mlxrt/${_f}" "${CMAKE_BINARY_DIR}/python/mlxrt/${_f}" COPYONLY)
endforeach()

if(SKBUILD)
  install(TARGETS mlxrt_python LIBRARY DESTINATION mlxrt)
  install(DIRECTORY python/mlxrt/ DESTINATION mlxrt)
endif()
