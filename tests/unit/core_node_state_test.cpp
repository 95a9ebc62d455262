// The job core (launcher/core/): each node's state, its moves and which
// messages it accepts, and the job's phase, without processes or sockets.
#include <stdexcept>
#include <variant>

#include <gtest/gtest.h>

#include "core/job_phase.h"
#include "core/node_state.h"
#include "seams/every_message.h"

namespace dlaunch {
namespace {

using S = NodeState;

constexpr S kAllStates[] = {S::kStarting, S::kHello, S::kReady, S::kDone, S::kEnded, S::kLost};

TEST(NodeState, TheMovesAreTheDiagramsAndNoOthers) {
  int allowed = 0;
  for (S from : kAllStates) {
    for (S to : kAllStates) allowed += node_transition_allowed(from, to) ? 1 : 0;
  }
  EXPECT_EQ(allowed, 9);
  EXPECT_TRUE(node_transition_allowed(S::kStarting, S::kHello));
  EXPECT_TRUE(node_transition_allowed(S::kHello, S::kReady));
  EXPECT_TRUE(node_transition_allowed(S::kReady, S::kDone));
  EXPECT_TRUE(node_transition_allowed(S::kDone, S::kEnded));
  // Done without Ready (Fatal, Abort), and from an agent of another version.
  EXPECT_TRUE(node_transition_allowed(S::kHello, S::kDone));
  EXPECT_TRUE(node_transition_allowed(S::kStarting, S::kDone));
  for (S from : {S::kStarting, S::kHello, S::kReady}) {
    EXPECT_TRUE(node_transition_allowed(from, S::kLost)) << node_state_name(from);
  }
  // Never back, never ahead of a step, nothing out of an end.
  EXPECT_FALSE(node_transition_allowed(S::kReady, S::kHello));
  EXPECT_FALSE(node_transition_allowed(S::kStarting, S::kReady));
  EXPECT_FALSE(node_transition_allowed(S::kDone, S::kLost));
  for (S to : kAllStates) {
    EXPECT_FALSE(node_transition_allowed(S::kEnded, to));
    EXPECT_FALSE(node_transition_allowed(S::kLost, to));
  }
}

TEST(NodeState, AMoveTheTableDoesNotAllowIsABug) {
  NodeLifecycle n;
  EXPECT_THROW(n.to(S::kReady), std::logic_error);
  EXPECT_EQ(n.state(), S::kStarting);
  n.to(S::kHello);
  EXPECT_THROW(n.to(S::kHello), std::logic_error);
}

TEST(NodeState, ClosingEndsADoneNodeAndLosesAnyOther) {
  NodeLifecycle done;
  done.to(S::kHello);
  done.to(S::kReady);
  done.to(S::kDone);
  done.close();
  EXPECT_EQ(done.state(), S::kEnded);
  EXPECT_TRUE(done.done());
  EXPECT_TRUE(done.link_gone());
  done.close();  // a second close changes nothing
  EXPECT_EQ(done.state(), S::kEnded);

  NodeLifecycle ready;
  ready.to(S::kHello);
  ready.to(S::kReady);
  ready.close();
  EXPECT_EQ(ready.state(), S::kLost);
  EXPECT_FALSE(ready.done());
  // What it said on the way is kept for the report.
  EXPECT_TRUE(ready.said_hello());
  EXPECT_TRUE(ready.said_ready());

  NodeLifecycle starting;
  starting.close();
  EXPECT_EQ(starting.state(), S::kLost);
  EXPECT_FALSE(starting.said_hello());
}

TEST(NodeState, HelloOnlyWhileStartingAndReadyOnlyAfterHello) {
  EXPECT_TRUE(node_accepts(S::kStarting, proto::Hello::kId));
  for (S s : {S::kHello, S::kReady, S::kDone}) {
    EXPECT_FALSE(node_accepts(s, proto::Hello::kId)) << node_state_name(s);
  }
  EXPECT_FALSE(node_accepts(S::kStarting, proto::Ready::kId));
  EXPECT_TRUE(node_accepts(S::kHello, proto::Ready::kId));
  EXPECT_FALSE(node_accepts(S::kReady, proto::Ready::kId));
  // An image's pull is part of the node's setup: between Hello and Ready only.
  EXPECT_FALSE(node_accepts(S::kStarting, proto::ImagePull::kId));
  EXPECT_TRUE(node_accepts(S::kHello, proto::ImagePull::kId));
  EXPECT_FALSE(node_accepts(S::kReady, proto::ImagePull::kId));
  // A new head's Reattach is answered by the job's agent with Resumed, in
  // Ready's place.
  EXPECT_FALSE(node_accepts(S::kStarting, proto::Resumed::kId));
  EXPECT_TRUE(node_accepts(S::kHello, proto::Resumed::kId));
  EXPECT_FALSE(node_accepts(S::kReady, proto::Resumed::kId));
}

TEST(NodeState, TheWorkersMessagesOnlyOnceReady) {
  for (std::uint16_t id : {proto::Started::kId, proto::Output::kId, proto::Exited::kId,
                           proto::FenceUp::kId, proto::WorkerAbort::kId, proto::Progress::kId,
                           proto::ProgressDamaged::kId, proto::ProbeResult::kId}) {
    EXPECT_FALSE(node_accepts(S::kStarting, id)) << id;
    EXPECT_FALSE(node_accepts(S::kHello, id)) << id;
    EXPECT_TRUE(node_accepts(S::kReady, id)) << id;
  }
  // Heartbeats from Setup on; Fatal and Done in any open state.
  EXPECT_FALSE(node_accepts(S::kStarting, proto::Heartbeat::kId));
  EXPECT_TRUE(node_accepts(S::kHello, proto::Heartbeat::kId));
  for (S s : {S::kStarting, S::kHello, S::kReady}) {
    EXPECT_TRUE(node_accepts(s, proto::Fatal::kId)) << node_state_name(s);
    EXPECT_TRUE(node_accepts(s, proto::Done::kId)) << node_state_name(s);
  }
}

TEST(NodeState, NothingAfterDoneAndNothingTheHeadSends) {
  for (const proto::Message& m : test::every_message()) {
    for (S s : {S::kDone, S::kEnded, S::kLost}) {
      NodeLifecycle n;
      if (s != S::kLost) n.to(S::kDone);
      if (s != S::kDone) n.close();
      ASSERT_EQ(n.state(), s);
      EXPECT_FALSE(n.accepts(m)) << proto::message_name(m) << " in " << node_state_name(s);
    }
    const bool head_sends =
        std::holds_alternative<proto::Setup>(m) || std::holds_alternative<proto::Start>(m) ||
        std::holds_alternative<proto::Abort>(m) || std::holds_alternative<proto::Shutdown>(m) ||
        std::holds_alternative<proto::FenceDown>(m) || std::holds_alternative<proto::Probe>(m) ||
        std::holds_alternative<proto::PauseOutput>(m) ||
        std::holds_alternative<proto::SignalRanks>(m) ||
        std::holds_alternative<proto::CollectStacks>(m) ||
        std::holds_alternative<proto::StdinData>(m) || std::holds_alternative<proto::StdinEof>(m) ||
        std::holds_alternative<proto::NetListen>(m) || std::holds_alternative<proto::NetSend>(m) ||
        std::holds_alternative<proto::Reattach>(m);
    if (head_sends) {
      for (S s : kAllStates) {
        EXPECT_FALSE(node_accepts(s, proto::message_id(m)))
            << proto::message_name(m) << " in " << node_state_name(s);
      }
    }
  }
}

TEST(JobPhase, ForwardOnlyAndFinishedOnlyThroughShuttingDown) {
  using P = JobPhase;
  constexpr P kPhases[] = {P::kStarting, P::kRunning, P::kAborting, P::kShuttingDown, P::kFinished};
  int moves = 0;
  for (P from : kPhases) {
    for (P to : kPhases) {
      if (from != to && job_phase_move_allowed(from, to)) ++moves;
    }
    EXPECT_TRUE(job_phase_move_allowed(from, from)) << job_phase_name(from);
  }
  EXPECT_EQ(moves, 7);
  EXPECT_TRUE(job_phase_move_allowed(P::kStarting, P::kShuttingDown));  // --check, nothing started
  EXPECT_FALSE(job_phase_move_allowed(P::kStarting, P::kFinished));
  EXPECT_FALSE(job_phase_move_allowed(P::kRunning, P::kStarting));
  EXPECT_FALSE(job_phase_move_allowed(P::kAborting, P::kRunning));
  EXPECT_FALSE(job_phase_move_allowed(P::kShuttingDown, P::kAborting));
  for (P to : kPhases) {
    if (to != P::kFinished) {
      EXPECT_FALSE(job_phase_move_allowed(P::kFinished, to));
    }
    if (to != P::kFinished && to != P::kShuttingDown) {
      EXPECT_FALSE(job_phase_move_allowed(P::kShuttingDown, to));
    }
  }
  EXPECT_EQ(checked_job_phase_move(P::kRunning, P::kAborting), P::kAborting);
  EXPECT_THROW(checked_job_phase_move(P::kFinished, P::kRunning), std::logic_error);
}

}  // namespace
}  // namespace dlaunch
