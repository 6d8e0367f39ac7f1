# The structured-output engine: xgrammar's C++ library as its PyPI wheel ships it (built once by its
# maintainers; nothing of it is compiled here), declared by the headers of the same release's source
# distribution. tools/setup/install-python-env.sh installs both (XGRAMMAR_VERSION in versions.env):
# the wheel and its apache-tvm-ffi runtime into the environment's site-packages, the source archive
# as share/mlxrt/xgrammar-VERSION.tar.gz; only include/xgrammar/*.h is read from it.
#
#   MLXRT_XGRAMMAR_SITE_PACKAGES  where the xgrammar and tvm_ffi packages are (default: the
#                                 environment's site-packages)
#   MLXRT_XGRAMMAR_SDIST          the source archive (default: MLXRT_VENV/share/mlxrt/...)
# Defines the target xgrammar.
set(MLXRT_XGRAMMAR_SITE_PACKAGES "${MLXRT_SITE_PACKAGES}" CACHE PATH
    "site-packages holding the xgrammar and apache-tvm-ffi wheels")
set(MLXRT_XGRAMMAR_SDIST "${MLXRT_VENV}/share/mlxrt/xgrammar-${XGRAMMAR_VERSION}.tar.gz" CACHE FILEPATH
    "xgrammar's source archive (for its headers)")
set(_xg_lib "${MLXRT_XGRAMMAR_SITE_PACKAGES}/xgrammar/libxgrammar_bindings.so")
set(_tvm_lib "${MLXRT_XGRAMMAR_SITE_PACKAGES}/tvm_ffi/lib/libtvm_ffi.so")
if(NOT IS_DIRECTORY "${MLXRT_XGRAMMAR_SITE_PACKAGES}/xgrammar-${XGRAMMAR_VERSION}.dist-info"
   OR NOT EXISTS "${_xg_lib}" OR NOT EXISTS "${_tvm_lib}" OR NOT EXISTS "${MLXRT_XGRAMMAR_SDIST}")
  message(FATAL_ERROR "no xgrammar ${XGRAMMAR_VERSION} (wheel with apache-tvm-ffi in "
                      "${MLXRT_XGRAMMAR_SITE_PACKAGES}, source archive ${MLXRT_XGRAMMAR_SDIST}): "
                      "run tools/setup/install-python-env.sh (or `make`)")
endif()
set(_xg_headers "${CMAKE_BINARY_DIR}/_deps/xgrammar-${XGRAMMAR_VERSION}")
if(NOT EXISTS "${_xg_headers}/include/xgrammar/xgrammar.h")
  file(REMOVE_RECURSE "${_xg_headers}.tmp")
  file(ARCHIVE_EXTRACT INPUT "${MLXRT_XGRAMMAR_SDIST}" DESTINATION "${_xg_headers}.tmp"
       PATTERNS "xgrammar-${XGRAMMAR_VERSION}/include/xgrammar/*")
  file(REMOVE_RECURSE "${_xg_headers}")
  file(RENAME "${_xg_headers}.tmp/xgrammar-${XGRAMMAR_VERSION}" "${_xg_headers}")
  file(REMOVE_RECURSE "${_xg_headers}.tmp")
endif()
add_library(tvm_ffi SHARED IMPORTED)
set_target_properties(tvm_ffi PROPERTIES
  IMPORTED_LOCATION "${_tvm_lib}"
  IMPORTED_SONAME "libtvm_ffi.so"
  INTERFACE_INCLUDE_DIRECTORIES "${MLXRT_XGRAMMAR_SITE_PACKAGES}/tvm_ffi/include")  # dlpack.h
add_library(xgrammar SHARED IMPORTED)
set_target_properties(xgrammar PROPERTIES
  IMPORTED_LOCATION "${_xg_lib}"
  IMPORTED_SONAME "libxgrammar_bindings.so"
  INTERFACE_INCLUDE_DIRECTORIES "${_xg_headers}/include"
  INTERFACE_LINK_LIBRARIES tvm_ffi)
set(MLXRT_XGRAMMAR_INCLUDE_DIRS "${_xg_headers}/include" "${MLXRT_XGRAMMAR_SITE_PACKAGES}/tvm_ffi/include")
# The wheel's library finds libtvm_ffi.so only through the run path of whoever loads it: DT_RPATH
# (unlike DT_RUNPATH) also serves the libraries' own dependencies.
add_link_options(LINKER:--disable-new-dtags)
list(APPEND MLX_LIBRARY_DIRS "${MLXRT_XGRAMMAR_SITE_PACKAGES}/xgrammar" "${MLXRT_XGRAMMAR_SITE_PACKAGES}/tvm_ffi/lib")
message(STATUS "xgrammar ${XGRAMMAR_VERSION} from ${MLXRT_XGRAMMAR_SITE_PACKAGES}")
