# The CPU kernels' instruction-set files (src/mlxrt/kernels/cpu/*_avx*.cpp, *_neon.cpp): each gets
# its own flags, and -ffp-contract=off always: a fused multiply-add the compiler chose would round
# once where MLX rounds twice (the kernels fuse only where they say so, with explicit intrinsics).
# They hold only code of their own (internal linkage), so nothing compiled for a wider instruction
# set reaches the rest of the program; the runtime picks them by what the CPU reports. Only the
# current architecture's files compile; the others are marked header-only. Used by the
# main build and by the aarch64 kernel test build (tools/aarch64).
function(mlxrt_cpu_kernel_flags target)
  set(_dir "${CMAKE_SOURCE_DIR}/src/mlxrt/kernels/cpu")
  if(DEFINED MLXRT_SOURCE_ROOT)
    set(_dir "${MLXRT_SOURCE_ROOT}/src/mlxrt/kernels/cpu")
  endif()
  set(_x86 "${_dir}/affine_qmm_avx512.cpp" "${_dir}/affine_qmm_avx2.cpp" "${_dir}/l3_qmm_avx512vnni.cpp"
           "${_dir}/l3_qmm_avx2.cpp" "${_dir}/l3_fused_avx2.cpp" "${_dir}/logsumexp_avx2.cpp"
           "${_dir}/argmax_avx2.cpp" "${_dir}/categorical_avx2.cpp"
           "${_dir}/exp_avx2.cpp")
  set(_arm "${_dir}/affine_qmm_neon.cpp" "${_dir}/l3_qmm_neon.cpp" "${_dir}/l3_qmm_neondot.cpp"
           "${_dir}/l3_fused_neon.cpp")
  # The sampling filters' loops over a row's elements: plain C++ that GCC's -O2 cost model
  # ("very cheap") leaves scalar; its dynamic model vectorizes them for the baseline instruction set.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    set_source_files_properties("${_dir}/sampling_masks.cpp" TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-fvect-cost-model=dynamic")
  endif()
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND NOT APPLE)
    target_compile_definitions(${target} PUBLIC MLXRT_CPU_X86_KERNELS=1)
    set_source_files_properties("${_dir}/affine_qmm_avx512.cpp" TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mf16c;-ffp-contract=off;-Wno-maybe-uninitialized")
    set_source_files_properties("${_dir}/affine_qmm_avx2.cpp" TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-mavx2;-mf16c;-ffp-contract=off")
    # The L3 kernels (l3_qmm_*.cpp) fuse where their definition says so, with explicit intrinsics.
    set_source_files_properties("${_dir}/l3_qmm_avx512vnni.cpp" TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mfma;-mf16c;-ffp-contract=off;-Wno-maybe-uninitialized")
    set_source_files_properties("${_dir}/l3_qmm_avx2.cpp" "${_dir}/l3_fused_avx2.cpp" TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-ffp-contract=off")
    # The L1 logsumexp, categorical draw and exp: the fused multiply-adds MLX's exp names, nothing the compiler fuses.
    set_source_files_properties("${_dir}/logsumexp_avx2.cpp" "${_dir}/categorical_avx2.cpp" "${_dir}/exp_avx2.cpp"
      TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-ffp-contract=off")
    set_source_files_properties("${_dir}/argmax_avx2.cpp" TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-mavx2;-mf16c;-ffp-contract=off")
    set_source_files_properties(${_arm} TARGET_DIRECTORY ${target} PROPERTIES HEADER_FILE_ONLY ON)
  elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$" AND NOT APPLE)
    # NEON (Advanced SIMD) is part of ARMv8-A: no flag and no run-time check for it.
    target_compile_definitions(${target} PUBLIC MLXRT_CPU_NEON_KERNELS=1)
    set_source_files_properties("${_dir}/affine_qmm_neon.cpp" "${_dir}/l3_qmm_neon.cpp" "${_dir}/l3_fused_neon.cpp"
      TARGET_DIRECTORY ${target} PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
    # SDOT (ARMv8.2 dot product): only this file, called only where the CPU reports it.
    set_source_files_properties("${_dir}/l3_qmm_neondot.cpp" TARGET_DIRECTORY ${target}
      PROPERTIES COMPILE_OPTIONS "-march=armv8.2-a+dotprod;-ffp-contract=off")
    set_source_files_properties(${_x86} TARGET_DIRECTORY ${target} PROPERTIES HEADER_FILE_ONLY ON)
  else()
    # Elsewhere MLX's own kernels run (matmul.h); the instruction-set files compile empty.
    set_source_files_properties(${_x86} ${_arm} TARGET_DIRECTORY ${target} PROPERTIES HEADER_FILE_ONLY ON)
  endif()
endfunction()
