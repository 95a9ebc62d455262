# Warnings for every target of the project: add_compile_options applies below this directory.
add_compile_options(-Wall -Wextra -Wpedantic -Wshadow -Wcast-align -Wformat=2 -Wimplicit-fallthrough
                    # designated initializers leave members at their defaults on purpose
                    -Wno-missing-field-initializers
                    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
                    $<$<COMPILE_LANGUAGE:CXX>:-Wold-style-cast>
                    $<$<COMPILE_LANGUAGE:CXX>:-Woverloaded-virtual>)
if(DLAUNCH_WERROR)
  add_compile_options(-Werror)
endif()
# GCC 12 at -O3 (the plain Release build) reports overlapping memcpy inside
# libstdc++'s std::string for `"literal" + str` and `str = "x"` (GCC bug
# 105329, fixed in GCC 13): the false positive lies in the library's inlined
# code, so rewriting each call site of ours only moves it. Off for GCC 12 only.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
endif()
