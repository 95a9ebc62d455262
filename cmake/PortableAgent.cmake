# The agent that runs on a node with nothing but a kernel and a C library
# (issue 30; docs/portable-agent.md): libstdc++, libgcc and hwloc linked in,
# libpmix loaded only for --mpi (agent/pmix/pmix_library.cpp), and no glibc
# symbol version above GLIBC_2.17 (agent/portable/glibc_compat.c, checked
# after every link). On x86-64 glibc where Debian's libhwloc.a is found, and
# never under a sanitizer (its interceptors must see pthread_create).
#
# Then bin/dlaunch-agent.gz: that agent stripped and gzip-compressed, what
# dlaunch copies to nodes that have no agent (any build makes it).
set(_portable_default OFF)
if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64)$"
   AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  include(CheckSymbolExists)
  check_symbol_exists(__GLIBC__ "features.h" DLAUNCH_HAVE_GLIBC)
  find_library(DLAUNCH_HWLOC_STATIC NAMES libhwloc.a HINTS ${HWLOC_LIBDIR} ${HWLOC_LIBRARY_DIRS})
  if(DLAUNCH_HAVE_GLIBC AND DLAUNCH_HWLOC_STATIC)
    set(_portable_default ON)
  endif()
endif()
option(DLAUNCH_PORTABLE_AGENT "Build dlaunch-agent to run on any x86-64 glibc >= 2.17"
       ${_portable_default})

# Newer than GLIBC_2.17 in what the agent and the static libstdc++/libgcc
# call, each answered in glibc_compat.c.
set(DLAUNCH_GLIBC_WRAPPED
  __libc_start_main __libc_single_threaded __cxa_thread_atexit_impl _dl_find_object
  pthread_create pthread_detach pthread_join pthread_once pthread_key_create __pthread_key_create
  pthread_key_delete pthread_getspecific pthread_setspecific pthread_sigmask pthread_kill
  pthread_condattr_setclock pthread_getaffinity_np pthread_setaffinity_np pthread_rwlock_init
  pthread_rwlock_destroy pthread_rwlock_rdlock pthread_rwlock_wrlock pthread_rwlock_unlock
  dlopen dlsym dlclose dlerror dladdr
  stat stat64 lstat lstat64 fstat fstat64 fstatat fstatat64
  memfd_create close_range getrandom getentropy arc4random sigabbrev_np
  pthread_cond_clockwait)

if(DLAUNCH_PORTABLE_AGENT)
  target_sources(dlaunch-agent PRIVATE ${PROJECT_SOURCE_DIR}/agent/portable/glibc_compat.c)
  set_target_properties(dlaunch-agent PROPERTIES DLAUNCH_STATIC_HWLOC ${DLAUNCH_HWLOC_STATIC})
  list(TRANSFORM DLAUNCH_GLIBC_WRAPPED PREPEND "LINKER:--wrap=" OUTPUT_VARIABLE _wraps)
  target_link_options(dlaunch-agent PRIVATE -static-libstdc++ -static-libgcc ${_wraps})
  # Older glibc keep pthread_* and dl* in libpthread.so.0 and libdl.so.2:
  # the agent names both (they are empty stubs since 2.34).
  # (-lpthread would find the empty libpthread.a that glibc 2.34+ ships.)
  target_link_libraries(dlaunch-agent PRIVATE -Wl,--no-as-needed -l:libpthread.so.0 -l:libdl.so.2)
  add_custom_command(TARGET dlaunch-agent POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DOBJDUMP=${CMAKE_OBJDUMP} -DFILE=$<TARGET_FILE:dlaunch-agent>
            -DMAX=2.17 -P ${PROJECT_SOURCE_DIR}/cmake/CheckGlibcVersions.cmake
    VERBATIM)
endif()

find_program(DLAUNCH_GZIP gzip REQUIRED)
set(DLAUNCH_AGENT_PACKED ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/dlaunch-agent.gz)
add_custom_command(
  OUTPUT ${DLAUNCH_AGENT_PACKED}
  COMMAND ${CMAKE_OBJCOPY} --strip-all $<TARGET_FILE:dlaunch-agent> ${DLAUNCH_AGENT_PACKED}.tmp
  COMMAND ${DLAUNCH_GZIP} -9nf ${DLAUNCH_AGENT_PACKED}.tmp
  COMMAND ${CMAKE_COMMAND} -E rename ${DLAUNCH_AGENT_PACKED}.tmp.gz ${DLAUNCH_AGENT_PACKED}
  DEPENDS dlaunch-agent
  COMMENT "Packing dlaunch-agent.gz (stripped, gzip) for nodes without an agent"
  VERBATIM)
add_custom_target(dlaunch-agent-packed ALL DEPENDS ${DLAUNCH_AGENT_PACKED})
set(DLAUNCH_AGENT_PACKED ${DLAUNCH_AGENT_PACKED} PARENT_SCOPE)
