# sharc_cuda.cmake - the CUDA toolchain for the GPU data path,
# included by the top-level CMakeLists.txt after the C options are set.
#
#   -DSHARC_WITH_CUDA=AUTO   (default) build the device kernels when CMake finds
#                            a working nvcc (PATH, CUDACXX or
#                            -DCMAKE_CUDA_COMPILER); sanitizer builds resolve
#                            AUTO to OFF
#   -DSHARC_WITH_CUDA=ON     the same, but a missing nvcc is an error
#   -DSHARC_WITH_CUDA=OFF    CPU only
#   -DCMAKE_CUDA_ARCHITECTURES=...   default "80;90" (SASS for sm_80 and sm_90
#                            plus their PTX, which later GPUs JIT-compile)
#   -DSHARC_SOFTCUDA=ON      testing without a GPU: the GPU data path and the
#                            gpu tests run on softcuda (tests/softcuda), a
#                            host-memory CUDA runtime; needs only the CUDA
#                            headers (no nvcc, no driver); overrides
#                            SHARC_WITH_CUDA
#
# Sets SHARC_HAVE_CUDA (ON/OFF) and, when ON, SHARC_CUDA_SOURCES
# (kernels/*.cu, for the kernels' layer). The caller adds SHARC_HAVE_CUDA=1
# and CUDA::cudart to the library targets.

# sharc_cuda_sources(files...): compiles device code (.cu) the way this
# build does, in the calling directory (source properties are per
# directory): with nvcc, IEEE division, no flush-to-zero and no
# contraction of a * b + c into one FMA (device results must match the
# host code bit for bit; nvcc's defaults, spelled out so that they stay,
# and --fmad, on by default); on softcuda, as host C++ through
# tests/softcuda/cuda_host.h (no C++ runtime in the objects, as with
# nvcc, so C programs link without libstdc++; no contraction either).
# SHARC_CUDA_ARCHS names the built architectures in messages.
function(sharc_cuda_sources)
  if(SHARC_SOFTCUDA)
    set_source_files_properties(${ARGN} PROPERTIES
      LANGUAGE CXX
      COMPILE_OPTIONS "-xc++;-std=c++17;-include;${PROJECT_SOURCE_DIR}/tests/softcuda/cuda_host.h;-I${PROJECT_SOURCE_DIR}/tests/softcuda;-fno-exceptions;-fno-rtti;-fno-threadsafe-statics;-ffp-contract=off;-Wno-unknown-pragmas"
      COMPILE_DEFINITIONS "SHARC_CUDA_ARCHS=\"softcuda\"")
  else()
    string(REPLACE ";" "," archs "${CMAKE_CUDA_ARCHITECTURES}")
    set_source_files_properties(${ARGN} PROPERTIES
      COMPILE_OPTIONS "--ftz=false;--prec-div=true;--fmad=false"
      COMPILE_DEFINITIONS "SHARC_CUDA_ARCHS=\"${archs}\"")
  endif()
endfunction()

set(SHARC_WITH_CUDA AUTO CACHE STRING "Build the CUDA data path: AUTO, ON or OFF")
set_property(CACHE SHARC_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
option(SHARC_SOFTCUDA "Run the GPU data path and gpu tests on softcuda (a host-memory CUDA runtime, tests/softcuda)" OFF)
set(SHARC_HAVE_CUDA OFF)
string(TOUPPER "${SHARC_WITH_CUDA}" SHARC_CUDA_MODE)

if(SHARC_SOFTCUDA)
  # No CUDA language: softcuda implements the runtime calls on the host,
  # and kernels/*.cu are compiled a second time, as host C++ through
  # tests/softcuda/cuda_host.h, so that softcuda runs the project's own
  # device code. Only the toolkit's headers are used, found without
  # find_package(CUDAToolkit), whose imported CUDA::cudart would take the
  # name given to softcuda below.
  find_path(SHARC_SOFTCUDA_INCLUDE_DIR cuda_runtime_api.h
    HINTS ${CUDAToolkit_ROOT} ENV CUDAToolkit_ROOT ENV CUDA_PATH ENV CUDA_HOME
          /usr/local/cuda
    PATH_SUFFIXES include)
  if(NOT SHARC_SOFTCUDA_INCLUDE_DIR OR
     NOT EXISTS ${SHARC_SOFTCUDA_INCLUDE_DIR}/cuda.h)
    message(FATAL_ERROR "SHARC_SOFTCUDA=ON needs the CUDA toolkit's headers "
      "(cuda_runtime_api.h, cuda.h); pass -DCUDAToolkit_ROOT=/usr/local/cuda")
  endif()
  set(CUDAToolkit_INCLUDE_DIRS ${SHARC_SOFTCUDA_INCLUDE_DIR})
  # The driver stand-in: soname libcuda.so.1, loaded by softcuda's first
  # call, so that comm/gpu/devptr.c's cuda_in_use (dlopen RTLD_NOLOAD of
  # libcuda.so.1) sees CUDA in use exactly when the real runtime would.
  add_library(softcuda_driver SHARED
    ${PROJECT_SOURCE_DIR}/tests/softcuda/softcuda_driver.c)
  set_target_properties(softcuda_driver PROPERTIES NO_SONAME ON)
  target_link_options(softcuda_driver PRIVATE -Wl,-soname,libcuda.so.1)
  # The runtime itself; kernel launches come from the device code below.
  add_library(softcuda SHARED
    ${PROJECT_SOURCE_DIR}/tests/softcuda/softcuda.c
    ${PROJECT_SOURCE_DIR}/tests/softcuda/softcuda_mem.c
    ${PROJECT_SOURCE_DIR}/tests/softcuda/softcuda_stream.c
    ${PROJECT_SOURCE_DIR}/tests/softcuda/softcuda_graph.c
    ${PROJECT_SOURCE_DIR}/tests/softcuda/softcuda_kernel.c
    ${PROJECT_SOURCE_DIR}/tests/softcuda/softcuda_block.c)
  target_include_directories(softcuda
    PUBLIC ${SHARC_SOFTCUDA_INCLUDE_DIR}
    PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/comm/core
            ${PROJECT_SOURCE_DIR}/kernels)
  target_compile_definitions(softcuda PRIVATE
    SOFTCUDA_DRIVER="$<TARGET_FILE:softcuda_driver>")
  target_link_libraries(softcuda PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
  add_dependencies(softcuda softcuda_driver)
  # Every target_link_libraries(... CUDA::cudart) now links softcuda.
  add_library(CUDA::cudart ALIAS softcuda)
  # sharc_static's export names its link dependencies (sharcConfig.cmake).
  install(TARGETS softcuda softcuda_driver EXPORT sharcTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  # cuBLAS on softcuda (tests/softcuda/softcuda_cublas.c says what it
  # models): the GEMMs queued as softcuda kernels, computed by OpenBLAS.
  # Every target_link_libraries(... CUDA::cublas) then links it.
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(OPENBLAS QUIET openblas)
  endif()
  if(OPENBLAS_FOUND)
    add_library(softcublas SHARED
      ${PROJECT_SOURCE_DIR}/tests/softcuda/softcuda_cublas.c)
    target_include_directories(softcublas
      PUBLIC ${SHARC_SOFTCUDA_INCLUDE_DIR}
      PRIVATE ${OPENBLAS_INCLUDE_DIRS})
    target_link_libraries(softcublas PUBLIC softcuda
                          PRIVATE ${OPENBLAS_LINK_LIBRARIES} Threads::Threads)
    add_library(CUDA::cublas ALIAS softcublas)
  else()
    message(WARNING "softcuda: OpenBLAS (pkg-config openblas) not found: "
      "the cuBLAS stand-in (softcublas, CUDA::cublas) and gpu.cublas are not "
      "built; install libopenblas-dev")
  endif()
  # softcuda's own semantics (stream order, events, errors, IPC).
  if(SHARC_BUILD_TESTS)
    enable_testing()
    add_executable(test_softcuda
      ${PROJECT_SOURCE_DIR}/tests/softcuda/test_softcuda.c)
    target_include_directories(test_softcuda PRIVATE ${PROJECT_SOURCE_DIR}/tests)
    target_link_libraries(test_softcuda PRIVATE softcuda)
    add_test(NAME gpu.softcuda COMMAND test_softcuda)
    set_tests_properties(gpu.softcuda PROPERTIES TIMEOUT 60
                         LABELS "gpu;softcuda" SKIP_RETURN_CODE 77)
  endif()
  # The device code as host C++ (cuda_host.h says what it maps and what it
  # refuses; sharc_cuda_sources above, the flags).
  enable_language(CXX)
  file(GLOB SHARC_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*.cu)
  sharc_cuda_sources(${SHARC_CUDA_SOURCES})
  set(SHARC_HAVE_CUDA ON)
  message(STATUS "CUDA: softcuda, the host-memory runtime of tests/softcuda "
    "(headers from ${SHARC_SOFTCUDA_INCLUDE_DIR}); no GPU is used")
elseif(SHARC_CUDA_MODE STREQUAL "AUTO" AND (SHARC_SANITIZE OR SHARC_TSAN))
  # nvcc runs the host compiler on code it generated itself, and the CUDA
  # runtime is not built with the sanitizers: false reports and link trouble.
  message(STATUS "CUDA: off in this sanitizer build (SHARC_WITH_CUDA=AUTO "
    "resolves to OFF with SHARC_SANITIZE or SHARC_TSAN; pass "
    "-DSHARC_WITH_CUDA=ON to force it)")
elseif(SHARC_CUDA_MODE STREQUAL "AUTO" OR SHARC_WITH_CUDA)
  # The CUDA toolkit's default place, for shells whose PATH lacks it (CI).
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(sharc_nvcc nvcc PATHS /usr/local/cuda/bin)
    if(sharc_nvcc)
      set(ENV{CUDACXX} ${sharc_nvcc})
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
      set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING
        "CUDA architectures for the device kernels")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(SHARC_HAVE_CUDA ON)
    message(STATUS "CUDA ${CMAKE_CUDA_COMPILER_VERSION}: device kernels for "
      "CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}")
  elseif(SHARC_CUDA_MODE STREQUAL "AUTO")
    message(STATUS "CUDA: no working nvcc found; the GPU data path is not "
      "built (put nvcc on PATH or set CUDACXX to enable it)")
  else()
    message(FATAL_ERROR "SHARC_WITH_CUDA=${SHARC_WITH_CUDA} but CMake finds no "
      "working CUDA compiler (check_language(CUDA)); put nvcc on PATH, set "
      "CUDACXX=/usr/local/cuda/bin/nvcc, or pass -DSHARC_WITH_CUDA=OFF")
  endif()
endif()

if(SHARC_HAVE_CUDA AND NOT SHARC_SOFTCUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  set(CMAKE_CUDA_VISIBILITY_PRESET hidden)
  # The library links CUDA::cudart (shared) itself; CMake's default would
  # add libcudart_static to every link as well.
  set(CMAKE_CUDA_RUNTIME_LIBRARY None)
  # The directory-wide add_compile_options above are gcc flags (-Wall,
  # -Werror, -fsanitize=...) that nvcc rejects: keep them off CUDA sources
  # and give nvcc its own spelling. The host compiler still sees -Wall
  # -Wextra (and -Werror) through -Xcompiler.
  get_directory_property(sharc_opts COMPILE_OPTIONS)
  set(sharc_c_opts "")
  foreach(opt IN LISTS sharc_opts)
    list(APPEND sharc_c_opts "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${opt}>")
  endforeach()
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${sharc_c_opts}")
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>")
  # No C++ runtime in the objects (no exceptions, RTTI or guarded statics in
  # nvcc's host code), so C programs link libsharc.a and libsharc.so without
  # libstdc++.
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fno-exceptions,-fno-rtti,-fno-threadsafe-statics>")
  if(SHARC_WERROR)
    add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings>"
                        "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror>")
  endif()
  file(GLOB SHARC_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*.cu)
  sharc_cuda_sources(${SHARC_CUDA_SOURCES})

endif()
