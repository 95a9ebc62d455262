# Boost.Asio 1.74 (Debian 12's) enables co_await under clang only when it finds
# <experimental/coroutine>, which libc++ has and libstdc++ does not: clang with
# Debian's default standard library would see no boost::asio::awaitable, and
# neither would clang-tidy reading a GCC build's compile_commands.json. Every
# compiler we build with supports C++20 coroutines with <coroutine>, so say so
# on every compile line (GCC's own detection gives the same value) once a
# check shows that it compiles.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_INCLUDES ${Boost_INCLUDE_DIRS})
set(CMAKE_REQUIRED_DEFINITIONS -DBOOST_ASIO_HAS_CO_AWAIT=1)
set(CMAKE_REQUIRED_QUIET ON)
check_cxx_source_compiles("
#include <utility>
#include <boost/asio/awaitable.hpp>
boost::asio::awaitable<void> f() { co_return; }
int main() { return 0; }" DLAUNCH_ASIO_CO_AWAIT)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_DEFINITIONS)
unset(CMAKE_REQUIRED_QUIET)
if(NOT DLAUNCH_ASIO_CO_AWAIT)
  message(FATAL_ERROR "Boost.Asio coroutines (boost::asio::awaitable) do not compile with "
                      "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}: "
                      "see CMakeFiles/CMakeError.log")
endif()
add_compile_definitions(BOOST_ASIO_HAS_CO_AWAIT=1)
