# Finds the pinned MLX (MLX_VERSION) in a Python environment's wheels and defines the target `mlx`
# and MLX_LIBRARY_DIRS.
#
#   MLXRT_VENV                the environment (a venv or any Python prefix with the MLX wheels);
#                             default: the project's .venv, made by `make`
#   MLXRT_MLX_CMAKE_PACKAGE   ON: through MLX's own CMake package. OFF: import libmlx.so and its
#                             headers from the wheel's layout. The CUDA wheels' package also asks for
#                             the CUDA toolkit and cuDNN headers (for building CUDA extensions), which
#                             mlxrt, calling only MLX's C++ API, does not use. AUTO (default): OFF for
#                             a CUDA backend wheel, ON otherwise.
set(MLXRT_VENV "${CMAKE_SOURCE_DIR}/.venv" CACHE PATH "Python environment holding the MLX wheels")
if(SKBUILD)
  # `pip install .`: the mlx wheel of the build's own environment (pyproject.toml's requirements).
  set(MLXRT_PYTHON "${Python_EXECUTABLE}")
  execute_process(
    COMMAND "${MLXRT_PYTHON}" -c "import os, mlx.core; print(os.path.dirname(os.path.dirname(mlx.core.__file__)))"
    OUTPUT_VARIABLE MLXRT_SITE_PACKAGES OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
else()
  if(EXISTS "${MLXRT_VENV}/bin/python")
    set(MLXRT_PYTHON "${MLXRT_VENV}/bin/python")
  else()
    set(MLXRT_PYTHON "${MLXRT_VENV}/bin/python3")
  endif()
  execute_process(
    COMMAND "${MLXRT_PYTHON}" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    OUTPUT_VARIABLE MLXRT_SITE_PACKAGES OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
endif()
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "no Python in ${MLXRT_VENV}: run `make` (it creates the environment)")
endif()

set(MLXRT_MLX_CMAKE_PACKAGE AUTO CACHE STRING
    "find MLX through its CMake package: ON, OFF (straight from the wheel) or AUTO (OFF for CUDA wheels)")
set(_mlx_package "${MLXRT_MLX_CMAKE_PACKAGE}")
if(_mlx_package STREQUAL "AUTO")  # decided again at each configure: the backend wheel may change
  file(GLOB _mlx_cuda_wheel "${MLXRT_SITE_PACKAGES}/mlx_cuda_*.dist-info")
  if(_mlx_cuda_wheel)
    set(_mlx_package OFF)
  else()
    set(_mlx_package ON)
  endif()
endif()

if(_mlx_package)
  find_package(MLX ${MLX_VERSION} EXACT CONFIG REQUIRED
    PATHS "${MLXRT_SITE_PACKAGES}/mlx/share/cmake/MLX" NO_DEFAULT_PATH)
else()
  # The same files the package would name; the exact version comes from the wheels' metadata.
  file(GLOB _mlx_backend "${MLXRT_SITE_PACKAGES}/mlx_*-${MLX_VERSION}.dist-info")
  set(MLX_LIBRARY_DIRS "${MLXRT_SITE_PACKAGES}/mlx/lib")
  if(NOT IS_DIRECTORY "${MLXRT_SITE_PACKAGES}/mlx-${MLX_VERSION}.dist-info" OR NOT _mlx_backend
     OR NOT EXISTS "${MLX_LIBRARY_DIRS}/libmlx.so")
    message(FATAL_ERROR "no mlx ${MLX_VERSION} with a backend wheel (mlx-cpu, mlx-cuda-13) in "
                        "${MLXRT_SITE_PACKAGES}: run `make`")
  endif()
  add_library(mlx SHARED IMPORTED)
  set_target_properties(mlx PROPERTIES
    IMPORTED_LOCATION "${MLX_LIBRARY_DIRS}/libmlx.so"
    IMPORTED_SONAME "libmlx.so"
    INTERFACE_INCLUDE_DIRECTORIES "${MLXRT_SITE_PACKAGES}/mlx/include"
    INTERFACE_COMPILE_FEATURES cxx_std_20)
endif()
message(STATUS "MLX ${MLX_VERSION} from ${MLX_LIBRARY_DIRS}")
