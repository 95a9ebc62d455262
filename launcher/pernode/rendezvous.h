// Per-node mode's rendezvous: how the launchers of one job meet, agree on
// node ranks, MASTER_ADDR and MASTER_PORT, and then watch each other so that a
// failure anywhere stops every node (docs/per-node.md, "How it works").
//
// One launcher hosts dlaunch's authenticated comm store (comm::StoreServer on
// a thread of its own): static rendezvous, node rank 0 at
// --master-addr:--master-port; c10d, whichever launcher can bind
// --rdzv-endpoint. Every launcher (the host too) is a client of it. Keys live
// under "dlaunch/rdzv/". The store is reached through a seam
// (pernode/rdzv_store.h): the TCP store in a job, a store in memory in the
// unit tests (tests/unit/pernode/rendezvous_test.cpp).
//
// Everything the rendezvous does runs on an event loop and its clock, as
// asynchronous store calls (AsyncStore) and timers, never on a thread of the
// rendezvous's own and never in a wait: joining a round and the exit barrier
// on the rendezvous's loop (its own, or a test's), the heartbeat and failure
// watch while the round runs on the round's loop (start_watch to
// stop_watch). join(), finish() and finish_succeeded() are the same calls
// made to wait, for the per-node driver, which has nothing else to do then.
// Not thread-safe: use it from the loops' thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlaunch/clock.h"
#include "dlaunch/error.h"
#include "pernode/rdzv_store.h"

namespace dlaunch {

struct RdzvSettings {
  bool is_static = true;
  std::string host;  // static: --master-addr; c10d: the endpoint's host
  std::uint16_t port = 0;
  std::string run_id;
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = -1;         // static: this node's
  int nproc = 1;              // ranks on this node
  std::string secret;         // the store's key (pernode.h: rendezvous_key)
  bool authenticated = true;  // false: an open rendezvous, its key public
  std::string local_addr;     // --local-addr
  std::string me;             // "host pid N", how this launcher is named to the others
  std::chrono::milliseconds join_timeout{600'000};
  std::chrono::milliseconds last_call{30'000};
  std::chrono::milliseconds read_timeout{60'000};
  std::chrono::milliseconds close_timeout{30'000};  // a re-rendezvous's wait for MIN nodes
  int max_restarts = 0;
  // The workers' MASTER_PORT when the user pinned it (-x MASTER_PORT=N);
  // 0: a static rendezvous's is --master-port (as torchrun's), a c10d one's
  // a free port node 0 finds.
  std::uint16_t pinned_master_port = 0;
  // Static: the port node 0's store moves to once the launchers have met
  // (--store-port); 0: a free one.
  std::uint16_t store_port = 0;
  bool mpi = false;                                     // --mpi: every launcher must say the same
  std::chrono::milliseconds heartbeat_timeout{30'000};  // 0: no heartbeat watch
};

struct Membership {
  int round = 0;  // the rendezvous round this membership is of (restart count)
  int nnodes = 1;
  int node_rank = 0;
  int nproc = 1;
  std::string master_addr;
  // 0: node 0's agent reserves a free one (a job of one node, no port asked
  // for): the ranks' MASTER_PORT is its.
  std::uint16_t master_port = 0;
  std::vector<std::string> names;  // each node rank's launcher ("host pid N")
  // c10d: each node rank's launcher's address (where it could host the
  // store after the host is lost); empty where unknown (static).
  std::vector<std::string> addrs;
  bool hosting = false;    // this launcher hosts the store
  std::string store_host;  // the store, for the workers (DLAUNCH_STORE_*)
  std::uint16_t store_port = 0;
};

// What the watch found: another node failed or is lost.
struct PeerFailure {
  std::string message;   // for this launcher's report
  int status = 1;        // the job's exit status (the failing rank's)
  bool final = false;    // no restart can help (an interrupt, a timeout, the store lost)
  bool joining = false;  // not a failure: a node waits to join (the restart is not counted)
};

class Rendezvous {
 public:
  // `network`: where the store is hosted and reached (the job's TCP store;
  // a store in memory in the unit tests). It must outlive the rendezvous.
  // Joins and exit barriers run on a loop of the rendezvous's own, in real
  // time.
  explicit Rendezvous(RdzvSettings s, rdzv::StoreNetwork& network = rdzv::tcp_rdzv_network());
  // ... on `io` and `clock` (a test's loop and manual clock), which must
  // outlive it.
  Rendezvous(RdzvSettings s, rdzv::StoreNetwork& network, boost::asio::io_context& io,
             Clock& clock);
  ~Rendezvous();  // stops the watch and drops a join or barrier under way
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Round `round` (0, then one per restart): hosts or connects (round 0),
  // joins, waits for the rendezvous to close and for node 0's MASTER_PORT.
  // `done` is called on the rendezvous's loop (never from inside this call)
  // with the membership, or with InputError (exit 2) when the launchers
  // disagree (--nnodes, --nproc-per-node, --rdzv-id, two claiming one node
  // rank), naming both, or Error when the rendezvous cannot be reached or
  // does not close in time. One join or barrier at a time.
  using Joined = std::function<void(std::exception_ptr, const Membership&)>;
  void start_join(int round, Joined done);
  Membership join(int round = 0);  // start_join, waiting: the loop runs until it is done

  // Starts the heartbeat and failure watch on `io` (the round's loop), its
  // deadlines on `clock`; both must outlive stop_watch().
  void start_watch(boost::asio::io_context& io, Clock& clock);
  // Ends the watch: its connections and timers go, and an answer not come
  // yet is dropped (finish() says this node's failure again if its answer
  // had not come). On the loop's thread, before the loop goes; finish()
  // calls it too.
  void stop_watch();
  // This node failed: the first failure published is the job's. Said at
  // once, on the watch's connection.
  void publish_failure(const std::string& report, int status, bool final);
  // Another node failed or is lost (set by the watch), if so.
  std::optional<PeerFailure> peer_failure() const { return peer_; }
  // Called when peer_failure() becomes set (at once if it is), on the loop:
  // it must not call the rendezvous; a driver posts to its loop from it.
  // nullptr: none.
  void on_peer_failure(std::function<void()> fn);
  // After publish_failure(): the failure that is the job's, when another
  // node's got to the store first (the first published wins everywhere), or
  // nothing when this node's did (or the store could not say within `wait`).
  // Runs the watch's loop (after the job on it has ended) until the store
  // has answered the publishing, at most `wait`.
  std::optional<PeerFailure> agreed_failure(std::chrono::milliseconds wait);
  // This node's part of the round is over (success or not): the others stop
  // watching it. `last`: this launcher is about to exit; the host then keeps
  // the store up until every other node is done. `done` on the loop.
  void start_finish(bool last, std::function<void()> done);
  void finish(bool last = true);  // start_finish, waiting
  // This node's ranks all succeeded: finish(false), then wait until the
  // round ends on every node (each done, or gone), as torchrun's exit
  // barrier does. `done` gets the failure another node published
  // meanwhile: a restart then takes this node in too, as after any failure.
  using Barrier = std::function<void(std::optional<PeerFailure>)>;
  void start_finish_succeeded(Barrier done);
  std::optional<PeerFailure> finish_succeeded();  // start_finish_succeeded, waiting
  // Whether the store is gone (its launcher died) and no surviving launcher
  // can host it (see take_over()): no further round.
  bool store_lost() const;

  // A connection of another part of this launcher to the rendezvous store
  // (the MPI fences'), answering on `io`; `timeout` bounds one request and a
  // reconnect. round_prefix(): the current round's keys.
  std::unique_ptr<rdzv::AsyncStore> connect_async(boost::asio::io_context& io,
                                                  std::chrono::milliseconds timeout) const;
  std::string round_prefix() const { return rkey(""); }

 private:
  struct Failure {
    std::string text;
    int status = 1;
    bool final = false;
  };
  static std::string encode(const Failure& f);
  // The watch, on the loop: each launcher heartbeats (beat) and says its
  // failure (send_failure); every launcher but the host parks one get on the
  // round's failure entry (await_failure); the host looks at its own table
  // (look) on its changes and at its deadlines.
  void beat();
  void send_failure();
  void await_failure();
  void start_host_watch();
  void look();
  void lost_member(std::size_t j, const std::string& why);
  void store_gone(const comm::StoreError& e);
  void set_peer(PeerFailure f);
  std::chrono::milliseconds heartbeat_period() const;
  // After the store was lost: may a survivor host it (c10d, elastic, MIN
  // still possible without node 0)? take_over() finds or becomes it.
  bool can_take_over() const;
  // A client's connection to the store: one request and a reconnect within `timeout`.
  comm::StoreOptions client_options(std::chrono::milliseconds timeout) const;

  // A join or an exit barrier under way (one at a time), on the
  // rendezvous's loop, from begin_op() to end_op(): each of its steps is a
  // store's answer or a timer wrapped by step(), which ends the operation
  // with what the step throws, and drops an answer that comes after the
  // operation ended.
  using Next = std::function<void()>;
  void begin_op(std::function<void(std::exception_ptr)> end);
  void end_op(std::exception_ptr e);
  template <class F>
  auto step(F f);
  // Runs the rendezvous's loop until `done`.
  void run_until(const bool& done);
  // The host's own store changed: `look` runs on the loop, once per burst.
  void on_host_change(Next look);
  // Joining: hosting or connecting, the settings, the job's port.
  void connect(const Next& next);
  [[noreturn]] void connect_failed(const comm::StoreError& e) const;
  std::string settings_text() const;
  void check_settings(const std::string& conf) const;
  void move_to_job_port(const Next& next);
  void take_over(std::size_t candidate, const Next& next);
  void join_round();
  std::chrono::milliseconds time_left() const;  // until the join's deadline (at least 1 ms)
  std::vector<std::string> static_keys() const;
  void join_static();
  void static_wait();
  void say_missing();
  void join_c10d();
  Error not_closed(long long joined) const;
  void read_closed();
  void read_master();
  // c10d: the host closes the round (close_look), the others wait for it.
  void close_round();
  void close_look();
  void await_close();
  // The exit barrier and the host's last wait (wait_for_others).
  void say_finished(bool barrier, const Next& next);
  void wait_for_others(bool failures);
  void others_look();
  void barrier_beat();
  bool host_slow(const comm::StoreError& e) const;

  // A value read from the store that no launcher writes: an Error naming the
  // key and the value (escaped), never used.
  [[noreturn]] void malformed(const std::string& k, const std::string& value) const;
  void check_names() const;                      // every member's name as a launcher writes it
  std::string key(const std::string& k) const;   // the job's
  std::string rkey(const std::string& k) const;  // this round's
  // The rendezvous's own loop and clock (the first constructor's).
  std::unique_ptr<boost::asio::io_context> own_io_;
  std::unique_ptr<Clock> own_clock_;
  boost::asio::io_context* home_ = nullptr;  // where joins and barriers run
  Clock* home_clock_ = nullptr;

  int round_ = 0;
  RdzvSettings s_;
  Membership m_;
  rdzv::StoreNetwork& net_;
  std::unique_ptr<rdzv::StoreHost> server_;
  // Joining, finishing (on the rendezvous's loop); holds this launcher's
  // alive key while it lasts.
  std::unique_ptr<rdzv::AsyncStore> store_;
  // The one store_ replaced last (it was answering when it was replaced).
  std::unique_ptr<rdzv::AsyncStore> retired_;

  // The operation under way.
  std::function<void(std::exception_ptr)> op_end_;
  std::shared_ptr<bool> op_live_;  // false once it ended
  std::shared_ptr<std::atomic<bool>> op_look_posted_;
  std::unique_ptr<Timer> op_timer_;
  SteadyTime deadline_{};                                // the join's: MIN must have come by then
  std::chrono::milliseconds wait_{};                     // what the deadline was (for messages)
  SteadyTime close_until_{};                             // await_close's current wait
  std::optional<SteadyTime> min_seen_;                   // close_look: since when MIN are here
  bool closing_ = false;                                 // close_look: the close is said
  long long join_idx_ = -1;                              // c10d: this launcher's join number
  std::vector<std::pair<int, std::string>> candidates_;  // take_over's
  std::string tried_, old_endpoint_, old_host_;
  bool barrier_failures_ = false;  // wait_for_others(true)
  bool barrier_waiting_ = false;   // a store failure now means the store is lost
  SteadyTime store_heard_{};       // the store's last answer to the watch's or barrier's calls
  std::vector<long long> barrier_hb_;
  std::vector<SteadyTime> barrier_seen_;
  std::vector<std::string> barrier_keys_;
  std::optional<PeerFailure> barrier_result_;

  // The watch (start_watch to stop_watch).
  boost::asio::io_context* io_ = nullptr;
  Clock* clock_ = nullptr;
  std::unique_ptr<rdzv::AsyncStore> watch_store_;    // heartbeats, failures said
  std::unique_ptr<rdzv::AsyncStore> failure_store_;  // the parked get (not the host)
  std::unique_ptr<Timer> beat_timer_;
  std::unique_ptr<Timer> look_timer_;  // the host's next look
  bool beat_unanswered_ = false;       // the last heartbeat's calls are not answered yet
  // The loop's: false once the watch stopped, so that a look posted from
  // the store's thread before then does nothing.
  std::shared_ptr<bool> watching_;
  // A look is posted and not run yet (set on the store's thread).
  std::shared_ptr<std::atomic<bool>> look_posted_;
  // The host's view of each member: its last heartbeat count and when it
  // moved, whether it is done, and since when its alive key is gone.
  struct Member {
    long long last = -1;
    SteadyTime seen{};
    bool done = false;
    std::optional<SteadyTime> gone_since;
  };
  std::vector<Member> members_;
  std::vector<std::string> look_keys_;  // what the host reads at each look
  bool ended_said_ = false;

  std::optional<PeerFailure> peer_;
  std::function<void()> on_peer_;      // on_peer_failure()
  std::optional<Failure> to_publish_;  // until the store has answered
  bool published_ = false;
  bool settled_ = false;     // this node's failure met the store: published_ says who won
  bool store_lost_ = false;  // the watch saw the store go: nothing more to say to it
  std::string endpoint_;     // host:port, for messages
  // Static: the port the launchers meet at (--master-port). The store moves
  // to a port of its own (s_.port) once everyone has met, so that rank 0 can
  // bind this one for MASTER_PORT as under torchrun.
  std::uint16_t meeting_port_ = 0;
  std::uint16_t job_port_ = 0;  // the host's: where the job's store moves
  std::string client_host_;     // where this launcher connects to the store
  std::string own_addr_;        // where the others could reach this launcher
};

}  // namespace dlaunch
