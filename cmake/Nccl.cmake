# The NCCL backend of comm needs the CUDA runtime and NCCL. On the machines
# this project targets, NCCL ships inside the CUDA toolkit's own folder
# (/usr/local/cuda-*/include/nccl.h, lib/libnccl.so), not as a Debian
# package, so it is looked for there first, then in NCCL_ROOT/NCCL_HOME.
#
#   DLAUNCH_NCCL=AUTO  build the backend if both are found (the default)
#   DLAUNCH_NCCL=ON    fail the configure step if they are not
#   DLAUNCH_NCCL=OFF   never build it
#
# Sets DLAUNCH_WITH_NCCL (ON/OFF), and when ON the imported target
# dlaunch::nccl (NCCL + CUDA runtime) and DLAUNCH_NCCL_VERSION / DLAUNCH_CUDA_VERSION.
set(DLAUNCH_NCCL AUTO CACHE STRING "Build comm's NCCL backend: AUTO, ON or OFF")
set_property(CACHE DLAUNCH_NCCL PROPERTY STRINGS AUTO ON OFF)
set(DLAUNCH_WITH_NCCL OFF)

if(NOT DLAUNCH_NCCL STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  set(_nccl_hints ${CUDAToolkit_LIBRARY_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
  if(CUDAToolkit_FOUND)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
              PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
                 PATH_SUFFIXES lib lib64)
  endif()
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _nccl_version_lines
         REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    foreach(part MAJOR MINOR PATCH)
      string(REGEX MATCH "NCCL_${part} ([0-9]+)" _m "${_nccl_version_lines}")
      set(_nccl_${part} ${CMAKE_MATCH_1})
    endforeach()
    set(DLAUNCH_NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
    set(DLAUNCH_CUDA_VERSION "${CUDAToolkit_VERSION}")
    # Non-blocking communicators and ncclCommFinalize (the watchdog) need 2.14.
    if(DLAUNCH_NCCL_VERSION VERSION_LESS 2.14)
      set(_nccl_why "NCCL ${DLAUNCH_NCCL_VERSION} at ${NCCL_INCLUDE_DIR} is older than 2.14")
    else()
      set(DLAUNCH_WITH_NCCL ON)
      add_library(dlaunch::nccl INTERFACE IMPORTED)
      target_include_directories(dlaunch::nccl INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(dlaunch::nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
      message(STATUS "NCCL backend: on (NCCL ${DLAUNCH_NCCL_VERSION} at ${NCCL_LIBRARY}, "
                     "CUDA ${DLAUNCH_CUDA_VERSION})")
    endif()
  elseif(NOT CUDAToolkit_FOUND)
    set(_nccl_why "no CUDA toolkit found (nvcc on PATH or CUDAToolkit_ROOT)")
  else()
    set(_nccl_why "CUDA ${CUDAToolkit_VERSION} found but not nccl.h/libnccl "
                  "(looked in ${_nccl_hints}; set NCCL_ROOT)")
  endif()
  if(NOT DLAUNCH_WITH_NCCL)
    if(DLAUNCH_NCCL STREQUAL "ON")
      message(FATAL_ERROR "DLAUNCH_NCCL=ON but ${_nccl_why}")
    endif()
    message(STATUS "NCCL backend: off (${_nccl_why})")
  endif()
else()
  message(STATUS "NCCL backend: off (DLAUNCH_NCCL=OFF)")
endif()
