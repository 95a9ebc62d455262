# Boost.Asio 1.74 (Debian 12's) enables co_await under clang only when it finds
# <experimental/coroutine>, which libc++ has and libstdc++ does not: clang with
# Debian's default standard library would build the launcher without
# boost::asio::awaitable. clang 14 supports libstdc++'s C++20 <coroutine>, so
# when Asio's own detection fails, tell it. GCC is detected right and never
# gets here.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  include(CheckCXXSourceCompiles)
  set(_asio_coro_src "
#include <utility>
#include <boost/asio/awaitable.hpp>
boost::asio::awaitable<void> f() { co_return; }
int main() { return 0; }")
  set(CMAKE_REQUIRED_INCLUDES ${Boost_INCLUDE_DIRS})
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles("${_asio_coro_src}" DLAUNCH_ASIO_CO_AWAIT_DETECTED)
  if(NOT DLAUNCH_ASIO_CO_AWAIT_DETECTED)
    set(CMAKE_REQUIRED_DEFINITIONS -DBOOST_ASIO_HAS_CO_AWAIT=1)
    check_cxx_source_compiles("${_asio_coro_src}" DLAUNCH_ASIO_CO_AWAIT_FORCED)
    if(NOT DLAUNCH_ASIO_CO_AWAIT_FORCED)
      message(FATAL_ERROR "Boost.Asio coroutines (boost::asio::awaitable) do not compile with "
                          "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
    endif()
    add_compile_definitions(BOOST_ASIO_HAS_CO_AWAIT=1)
    message(STATUS "Boost.Asio: co_await enabled by hand (BOOST_ASIO_HAS_CO_AWAIT=1)")
  endif()
  unset(CMAKE_REQUIRED_INCLUDES)
  unset(CMAKE_REQUIRED_DEFINITIONS)
  unset(CMAKE_REQUIRED_QUIET)
endif()
