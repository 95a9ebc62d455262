// The console as a job's observer (jobs/job_observer.h): dlaunch's lines and
// the final report on stderr through the Console (output/console.h: in order
// with the ranks' output, never blocking the loop), and the progress line
// (controller/progress.h), cleared before anything else is written.
#pragma once

#include <string>
#include <string_view>

#include "controller/progress.h"
#include "jobs/job_observer.h"
#include "output/console.h"

namespace dlaunch {

class ConsoleObserver final : public JobObserver {
 public:
  // progress: whether the status line is shown (typically isatty(2)).
  ConsoleObserver(Console& console, bool progress)
      : console_(console),
        progress_(progress, [this](std::string_view text) { console_.write(true, text); }) {}
  ConsoleObserver(const ConsoleObserver&) = delete;
  ConsoleObserver& operator=(const ConsoleObserver&) = delete;

  void on_text(std::string_view text) override {
    progress_.clear();
    console_.write(true, text);
  }
  void on_progress(std::string_view line) override {
    if (line.empty()) {
      progress_.clear();
    } else {
      progress_.show(std::string(line));
    }
  }
  void on_report(std::string_view report) override { on_text(report); }

 private:
  Console& console_;
  Progress progress_;
};

}  // namespace dlaunch
