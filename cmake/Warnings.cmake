# Warnings for every target of the project: add_compile_options applies below this directory.
add_compile_options(-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
                    -Wcast-align -Woverloaded-virtual -Wformat=2 -Wimplicit-fallthrough
                    # designated initializers leave members at their defaults on purpose
                    -Wno-missing-field-initializers)
if(DLAUNCH_WERROR)
  add_compile_options(-Werror)
endif()
# Boost.Asio and fmt headers are system headers; keep their warnings out of ours.
