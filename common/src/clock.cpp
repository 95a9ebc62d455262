#include "dlaunch/clock.h"

#include <memory>
#include <utility>

#include <boost/asio/steady_timer.hpp>

namespace dlaunch {
namespace {

class AsioTimer final : public Timer {
 public:
  explicit AsioTimer(boost::asio::io_context& io) : timer_(io) {}
  ~AsioTimer() override { *alive_ = false; }

  void expires_at(SteadyTime when, std::function<void()> handler) override {
    // A handler already queued by Asio for an earlier expiry must not run:
    // each wait carries its generation, and only the current one fires.
    const unsigned generation = ++generation_;
    expiry_ = when;
    timer_.expires_at(when);
    timer_.async_wait([this, alive = alive_, generation,
                       handler = std::move(handler)](boost::system::error_code ec) {
      if (ec || !*alive || generation != generation_) return;
      expiry_ = SteadyTime::max();
      handler();
    });
  }
  void cancel() override {
    ++generation_;
    expiry_ = SteadyTime::max();
    timer_.cancel();
  }
  SteadyTime expiry() const override { return expiry_; }

 private:
  boost::asio::steady_timer timer_;
  unsigned generation_ = 0;
  SteadyTime expiry_ = SteadyTime::max();
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace

std::unique_ptr<Timer> AsioClock::make_timer() { return std::make_unique<AsioTimer>(io_); }

}  // namespace dlaunch
