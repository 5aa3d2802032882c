# Finds every external dependency once and exposes each as an imported target, so that lib/ modules
# link exactly what they use. Order: LibTorch (wheel or archive), then the system packages.

# ---- LibTorch ----
# Given Torch_DIR or CMAKE_PREFIX_PATH (an unpacked LibTorch archive, or the wheel's prefix) it is used as is.
# Otherwise ask Python where the torch wheel keeps its CMake files: the project venv first, then python3.
# Two warnings of torch's CMake files say nothing about this build, so they are kept quiet: its cuda.cmake enables
# CUDA, which initialises CMAKE_CUDA_ARCHITECTURES (policy CMP0104), then warns that it ignores that value (our own
# CUDA targets name their architectures themselves); and the wheel has no separate kineto library (the profiler is
# built into libtorch_cpu), which TorchConfig looks for anyway.
cmake_policy(SET CMP0104 OLD)
find_package(Torch CONFIG QUIET)
if(NOT Torch_FOUND)
  set(_trainer_pythons "${PROJECT_SOURCE_DIR}/.venv/bin/python3" python3)
  foreach(_py IN LISTS _trainer_pythons)
    if(_py STREQUAL "python3")
      find_program(_py_exe python3)
    else()
      set(_py_exe "${_py}")
    endif()
    if(_py_exe AND EXISTS "${_py_exe}")
      execute_process(COMMAND "${_py_exe}" -c "import torch;print(torch.utils.cmake_prefix_path)"
                      OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                      RESULT_VARIABLE _torch_rc ERROR_QUIET)
      if(_torch_rc EQUAL 0 AND _torch_prefix)
        message(STATUS "LibTorch from ${_py_exe}: ${_torch_prefix}")
        list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
        if(NOT DEFINED kineto_LIBRARY AND EXISTS "${_torch_prefix}/../../lib/libtorch_cpu.so")
          get_filename_component(kineto_LIBRARY "${_torch_prefix}/../../lib/libtorch_cpu.so" ABSOLUTE)
        endif()
        break()
      endif()
    endif()
    unset(_py_exe CACHE)
  endforeach()
  find_package(Torch CONFIG REQUIRED)
endif()
message(STATUS "LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}")

# Torch's imported target carries its include dirs; build one interface target that adds CUDA when present.
add_library(trainer_torch INTERFACE)
target_link_libraries(trainer_torch INTERFACE ${TORCH_LIBRARIES})
if(TARGET torch_cuda OR TARGET c10_cuda OR CUDA_FOUND OR CAFFE2_USE_CUDA)
  set(TRAINER_WITH_CUDA ON)
else()
  set(TRAINER_WITH_CUDA OFF)
endif()
if(TRAINER_WITH_CUDA)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    target_link_libraries(trainer_torch INTERFACE CUDA::cudart)
    target_compile_definitions(trainer_torch INTERFACE TRAINER_WITH_CUDA=1)
  else()
    set(TRAINER_WITH_CUDA OFF)
  endif()
endif()
message(STATUS "trainer: CUDA support ${TRAINER_WITH_CUDA}")

# ---- CUDA kernels of our own (lib/data/kernels): nvcc from the toolkit; without it the callers use ATen ops ----
set(TRAINER_WITH_KERNELS OFF)
if(TRAINER_WITH_CUDA AND NOT TRAINER_LIBFUZZER)
  if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE AND EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}")
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
      set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}")
    endif()
    # Torch's CMake config fills CMAKE_CUDA_FLAGS with its own -gencode list (down to sm_50, which nvcc 13 refuses);
    # our kernels include no torch headers and name their architectures on their targets.
    set(CMAKE_CUDA_FLAGS "")
    enable_language(CUDA)
    set(TRAINER_WITH_KERNELS ON)
  endif()
endif()
message(STATUS "trainer: own CUDA kernels ${TRAINER_WITH_KERNELS}")

# ---- nvJPEG (data.decode: gpu): the CUDA toolkit's, else the nvidia-nvjpeg wheel in the project venv ----
set(TRAINER_WITH_NVJPEG OFF)
if(TRAINER_WITH_CUDA)
  if(TARGET CUDA::nvjpeg)
    add_library(trainer_nvjpeg INTERFACE)
    target_link_libraries(trainer_nvjpeg INTERFACE CUDA::nvjpeg)
    set(TRAINER_WITH_NVJPEG ON)
  else()
    file(GLOB _nvj_dirs "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/nvidia/cu13")
    find_path(TRAINER_NVJPEG_INCLUDE nvjpeg.h HINTS ${_nvj_dirs} PATH_SUFFIXES include NO_DEFAULT_PATH)
    find_library(TRAINER_NVJPEG_LIB NAMES nvjpeg libnvjpeg.so.13 HINTS ${_nvj_dirs} PATH_SUFFIXES lib NO_DEFAULT_PATH)
    if(TRAINER_NVJPEG_INCLUDE AND TRAINER_NVJPEG_LIB)
      add_library(trainer_nvjpeg INTERFACE)
      target_include_directories(trainer_nvjpeg SYSTEM INTERFACE ${TRAINER_NVJPEG_INCLUDE})
      target_link_libraries(trainer_nvjpeg INTERFACE ${TRAINER_NVJPEG_LIB})
      set(TRAINER_WITH_NVJPEG ON)
    endif()
  endif()
endif()
if(TRAINER_WITH_NVJPEG)
  target_compile_definitions(trainer_nvjpeg INTERFACE TRAINER_WITH_NVJPEG=1)
endif()
message(STATUS "trainer: nvJPEG (GPU decode) ${TRAINER_WITH_NVJPEG}")

# ---- OpenCV (core + imgproc only) ----
find_package(OpenCV QUIET COMPONENTS core imgproc)
add_library(trainer_opencv INTERFACE)
if(OpenCV_FOUND)
  target_link_libraries(trainer_opencv INTERFACE opencv_core opencv_imgproc)
else()
  # Debian/Ubuntu ship OpenCV's CMake config only with the full libopencv-dev; find the two libraries directly.
  find_path(TRAINER_OPENCV_INCLUDE opencv2/core.hpp PATH_SUFFIXES opencv4 REQUIRED)
  find_library(TRAINER_OPENCV_CORE opencv_core REQUIRED)
  find_library(TRAINER_OPENCV_IMGPROC opencv_imgproc REQUIRED)
  target_include_directories(trainer_opencv SYSTEM INTERFACE ${TRAINER_OPENCV_INCLUDE})
  target_link_libraries(trainer_opencv INTERFACE ${TRAINER_OPENCV_IMGPROC} ${TRAINER_OPENCV_CORE})
  message(STATUS "OpenCV (direct): ${TRAINER_OPENCV_CORE}")
endif()

# ---- JPEG: libjpeg-turbo (jpeglib for crop/scaled decode, turbojpeg for encode) ----
find_package(JPEG REQUIRED)
find_path(TRAINER_TURBOJPEG_INCLUDE turbojpeg.h REQUIRED)
find_library(TRAINER_TURBOJPEG_LIB turbojpeg REQUIRED)
add_library(trainer_jpeg INTERFACE)
target_include_directories(trainer_jpeg SYSTEM INTERFACE ${TRAINER_TURBOJPEG_INCLUDE})
target_link_libraries(trainer_jpeg INTERFACE JPEG::JPEG ${TRAINER_TURBOJPEG_LIB})

find_package(PNG REQUIRED)
find_package(ZLIB REQUIRED)

# ---- yaml-cpp (0.7 exports `yaml-cpp`, 0.8 `yaml-cpp::yaml-cpp`) ----
find_package(yaml-cpp REQUIRED)
add_library(trainer_yaml INTERFACE)
if(TARGET yaml-cpp::yaml-cpp)
  target_link_libraries(trainer_yaml INTERFACE yaml-cpp::yaml-cpp)
else()
  target_link_libraries(trainer_yaml INTERFACE yaml-cpp)
endif()

find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(Threads REQUIRED)


# ---- one precompiled torch header, reused by every target that includes torch ----
# Each torch TU costs ~20-40 s without it; the PCH is built once and shared with REUSE_FROM.
function(trainer_use_torch_pch target)
  if(TRAINER_USE_PCH)
    target_precompile_headers(${target} REUSE_FROM trainer_torch_pch)
  endif()
endfunction()
