# libFuzzer builds (scripts/fuzz.sh): -DDLAUNCH_FUZZ=ON with clang instruments
# every target for coverage and ASan+UBSan; tests/fuzz adds one fuzzer per
# decoder. Off (the default), nothing here touches the build.
option(DLAUNCH_FUZZ "Build the libFuzzer targets in tests/fuzz (clang only)" OFF)
if(DLAUNCH_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DLAUNCH_FUZZ needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
                        "configure with CC=clang CXX=clang++, or run scripts/fuzz.sh")
  endif()
  # The code under test gets coverage instrumentation; only the fuzzers link libFuzzer's main.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
