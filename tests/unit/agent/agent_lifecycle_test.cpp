// The agent's lifecycle tables (agent/lifecycle.h): its moves, and what it
// does with every message from the head in every phase, without a process.
#include <variant>

#include <gtest/gtest.h>

#include "../seams/every_message.h"
#include "dlaunch/proto/protocol.h"
#include "lifecycle.h"

namespace dlaunch::agent {
namespace {

using P = AgentPhase;

// The phases of a job's agent; a relay's (kRelaying) has a test of its own.
constexpr P kAllPhases[] = {P::kHello, P::kSetup, P::kReady, P::kRunning, P::kStopping, P::kDone};

TEST(AgentLifecycle, TheMovesAreForwardOnly) {
  int moves = 0;
  for (P from : kAllPhases) {
    for (P to : kAllPhases) {
      if (from != to && agent_move_allowed(from, to)) ++moves;
    }
  }
  EXPECT_EQ(moves, 9);
  EXPECT_TRUE(agent_move_allowed(P::kHello, P::kSetup));
  EXPECT_TRUE(agent_move_allowed(P::kSetup, P::kReady));
  EXPECT_TRUE(agent_move_allowed(P::kReady, P::kRunning));
  EXPECT_TRUE(agent_move_allowed(P::kReady, P::kDone));      // --check: Shutdown without Start
  EXPECT_FALSE(agent_move_allowed(P::kSetup, P::kRunning));  // never Start before Ready
  EXPECT_FALSE(agent_move_allowed(P::kRunning, P::kReady));
  EXPECT_FALSE(agent_move_allowed(P::kStopping, P::kRunning));  // nothing starts after an Abort
  for (P to : kAllPhases) {
    if (to != P::kDone) {
      EXPECT_FALSE(agent_move_allowed(P::kDone, to)) << agent_phase_name(to);
    }
  }
}

TEST(AgentLifecycle, SetupOnceAndStartOnlyWhenReady) {
  for (P p : kAllPhases) {
    EXPECT_EQ(agent_verdict(p, proto::Setup::kId),
              p == P::kSetup ? Verdict::kHandle : Verdict::kFatal)
        << agent_phase_name(p);
    for (std::uint16_t id :
         {proto::Start::kId, proto::Probe::kId, proto::NetListen::kId, proto::NetSend::kId}) {
      EXPECT_EQ(agent_verdict(p, id), p == P::kReady ? Verdict::kHandle : Verdict::kIgnore)
          << agent_phase_name(p) << " " << id;
    }
  }
}

TEST(AgentLifecycle, TheHeadsStopsAndRequestsInEveryPhaseItsOwnMessagesInNone) {
  for (const proto::Message& m : test::every_message()) {
    const bool any_time =
        std::holds_alternative<proto::Abort>(m) || std::holds_alternative<proto::Shutdown>(m) ||
        std::holds_alternative<proto::Heartbeat>(m) ||
        std::holds_alternative<proto::FenceDown>(m) ||
        std::holds_alternative<proto::PauseOutput>(m) ||
        std::holds_alternative<proto::SignalRanks>(m) ||
        std::holds_alternative<proto::CollectStacks>(m) ||
        std::holds_alternative<proto::StdinData>(m) || std::holds_alternative<proto::StdinEof>(m);
    const bool agents_own =
        std::holds_alternative<proto::Hello>(m) || std::holds_alternative<proto::Ready>(m) ||
        std::holds_alternative<proto::Started>(m) || std::holds_alternative<proto::Output>(m) ||
        std::holds_alternative<proto::Exited>(m) || std::holds_alternative<proto::Fatal>(m) ||
        std::holds_alternative<proto::Done>(m) || std::holds_alternative<proto::FenceUp>(m) ||
        std::holds_alternative<proto::WorkerAbort>(m) ||
        std::holds_alternative<proto::ProbeResult>(m) || std::holds_alternative<proto::Stacks>(m) ||
        std::holds_alternative<proto::StdinAck>(m) || std::holds_alternative<proto::Progress>(m) ||
        std::holds_alternative<proto::ProgressDamaged>(m) ||
        std::holds_alternative<proto::NetListening>(m) ||
        std::holds_alternative<proto::NetSent>(m) || std::holds_alternative<proto::ImagePull>(m) ||
        std::holds_alternative<proto::Resumed>(m);
    for (P p : kAllPhases) {
      if (any_time) {
        EXPECT_EQ(agent_verdict(p, proto::message_id(m)), Verdict::kHandle)
            << proto::message_name(m) << " in " << agent_phase_name(p);
      }
      if (agents_own) {
        EXPECT_EQ(agent_verdict(p, proto::message_id(m)), Verdict::kFatal)
            << proto::message_name(m) << " in " << agent_phase_name(p);
      }
    }
  }
}

// A new head's agent: Reattach instead of Setup, once; then it relays (its
// channel is the job's agent's) and takes nothing.
TEST(AgentLifecycle, ReattachOnlyInsteadOfSetupAndARelayTakesNothing) {
  for (P p : kAllPhases) {
    EXPECT_EQ(agent_verdict(p, proto::Reattach::kId),
              p == P::kSetup ? Verdict::kHandle : Verdict::kFatal)
        << agent_phase_name(p);
  }
  EXPECT_TRUE(agent_move_allowed(P::kSetup, P::kRelaying));
  EXPECT_TRUE(agent_move_allowed(P::kRelaying, P::kDone));
  for (P p : kAllPhases) {
    if (p != P::kSetup) {
      EXPECT_FALSE(agent_move_allowed(p, P::kRelaying)) << agent_phase_name(p);
    }
    if (p != P::kDone) {
      EXPECT_FALSE(agent_move_allowed(P::kRelaying, p)) << agent_phase_name(p);
    }
  }
  for (const proto::Message& m : test::every_message()) {
    EXPECT_EQ(agent_verdict(P::kRelaying, proto::message_id(m)), Verdict::kIgnore)
        << proto::message_name(m);
  }
}

}  // namespace
}  // namespace dlaunch::agent
