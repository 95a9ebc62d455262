// MoveTable: the moves a state machine may make among the values of an enum,
// as a table built at compile time (the job core's node states and phases,
// launcher/core/; the agent's phases, agent/lifecycle.h). `State` is an enum
// whose values are 0..N-1.
#pragma once

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dlaunch {

template <typename State, std::size_t N>
class MoveTable {
 public:
  constexpr MoveTable& allow(State from, State to) {
    moves_.at(index(from)).at(index(to)) = true;
    return *this;
  }
  constexpr bool allows(State from, State to) const { return moves_.at(index(from)).at(index(to)); }

 private:
  static constexpr std::size_t index(State s) { return static_cast<std::size_t>(s); }
  std::array<std::array<bool, N>, N> moves_{};
};

// A move a table does not allow: a bug of the program, not of its input.
// `machine` names the state machine ("node state", "job phase").
[[noreturn]] inline void throw_bad_move(std::string_view machine, std::string_view from,
                                        std::string_view to) {
  throw std::logic_error(std::string(machine) + ": no move from " + std::string(from) + " to " +
                         std::string(to));
}

}  // namespace dlaunch
