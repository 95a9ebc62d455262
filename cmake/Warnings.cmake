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
