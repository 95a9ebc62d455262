// OutputSink: where workers' output ends up on the head. Each line goes to
// dlaunch's stdout or stderr (the stream the worker used) with a rank prefix
// (optionally coloured, optionally after a timestamp), in one write per batch
// so no two lines ever mix; optionally also raw to DIR/<job-id>/rank.N.{out,err}
// (or mpirun's DIR/1/rank.N/{stdout,stderr}).
// --ranks limits what the console shows; the files and the report's stderr
// tail always get every rank. It keeps the last lines of each rank's stderr
// for the failure report. Single-threaded.
//
// The console is written without blocking (output/console.h): what the
// terminal or pipe does not take at once is queued, and the controller
// pauses the agents' output while the queue is high. A per-rank file that
// cannot be written (ENOSPC, EIO, EDQUOT, ...) is said once on stderr, with
// its path and the error, and is not written again; the job and the console
// go on. The files are created and written on the console's FileWriter
// thread (output/file_writer.h), so a disk that stops answering holds that
// thread and, through back-pressure, the ranks' output, never the loop.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlaunch/proto/protocol.h"
#include "dlaunch/unique_fd.h"
#include "output/console.h"
#include "output/console_style.h"

namespace dlaunch {

class OutputSink {
 public:
  struct Config {
    PrefixMode prefix = PrefixMode::kRank;
    std::string output_dir;  // empty: no files
    // mpirun's --output-filename: DIR/1/rank.N/stdout and stderr (without
    // the 1/ when !mpirun_jobid), N zero-padded to the digits of the world
    // size, every file made at the start and emptied if it was there. Only
    // stdout with merge_stderr.
    std::string mpirun_dir;  // empty: none
    bool mpirun_jobid = true;
    bool console = true;        // false: the ranks' output goes to the files only (:nocopy)
    bool merge_stderr = false;  // a rank's stderr goes where its stdout goes
    std::string job_id;
    std::vector<std::string> node_of_rank;  // node name per global rank
    int stdout_fd = 1;
    int stderr_fd = 2;
    std::size_t tail_lines = 20;
    std::vector<int> ranks;  // --ranks: the console shows only these (sorted); empty: all
    // torchrun's --redirects: rank -> streams kept off the console (1
    // stdout, 2 stderr, 3 both); they still go to the files.
    std::map<int, int> redirected;
    bool timestamps = false;    // --timestamps: the time a line reached dlaunch, in front
    bool color_stdout = false;  // coloured prefixes on stdout_fd (console_style.h decides)
    bool color_stderr = false;  // and on stderr_fd
  };

  // Creates DIR/<job-id>/ when output_dir is set; throws dlaunch::Error.
  explicit OutputSink(Config cfg);

  // data: whole lines ending in '\n', or (partial) a piece of one. With a
  // prefix (or timestamps) every line gets one, and a piece without its
  // newline (a line longer than the agent's 64 KiB, a last line without one)
  // is ended with one, so that the next line, perhaps another rank's, starts
  // clean. With PrefixMode::kNone and no timestamps the console gets the
  // bytes unchanged. The per-rank files always get them unchanged.
  void write(int rank, proto::Stream stream, std::string_view data, bool partial);
  // The last lines a rank wrote to stderr, oldest first.
  std::vector<std::string> stderr_tail(int rank) const;
  std::string prefix(int rank) const;
  // dlaunch's stdout and stderr (cfg.stdout_fd, cfg.stderr_fd).
  Console& console() { return console_; }
  // With an output folder: a new file `name` in DIR/<job-id>/, which the
  // console's FileWriter creates and writes (console().write_file()); its
  // path is output_path(name). Without one, none.
  std::optional<FileWriter::Target> add_job_file(const std::string& name, mode_t mode);
  std::string output_path(const std::string& name) const { return dir_ + "/" + name; }

  // The job's record (jobs/registry.h) keeps each rank's output, stdout and
  // stderr as they came, in RECORD/output/<attempt>/rank-N.log (0600, the
  // folders 0700): at most about `rank_bytes` per rank and attempt, since
  // past half of it the file becomes rank-N.log.1 (the one before it goes)
  // and a new one starts. Written by the console's FileWriter like the
  // --output-dir files. A folder that cannot be made is said once on
  // stderr, and nothing is kept.
  void keep_rank_logs(const std::string& record_dir, std::size_t rank_bytes);
  // The record's folder, for write_record_file.
  void keep_record(const std::string& record_dir);
  // The ranks' output from here on is of this attempt (0, then one more for
  // each restart).
  // `continued`: a new head takes a running attempt over (dlaunch attach
  // --recover): the files its ranks' output went to so far become the
  // older half (rank-N.log.1), as a rotation makes them.
  void start_attempt(int attempt, bool continued = false);
  // Where the record keeps rank's output of this attempt; empty: it does not.
  std::string rank_log(int rank) const;
  // Writes `text` to RECORD/name (0600) off the loop, where it appears
  // whole (written as .name.part, then renamed); false without a record.
  bool write_record_file(const std::string& name, std::string_view text);
  // Where write_record_file puts `name`; empty without a record.
  std::string record_path(const std::string& name) const {
    return record_dir_.empty() ? std::string() : record_dir_ + "/" + name;
  }

 private:
  Config cfg_;
  Console console_;
  std::string dir_;
  UniqueFd dir_fd_;  // the job's output folder, opened when made
  std::map<std::pair<int, int>, FileWriter::Target> files_;  // (rank, 1 or 2)
  void open_mpirun_files();
  void keep_rank_output(int rank, std::string_view data);
  struct RankLog {
    FileWriter::Target target = 0;
    std::size_t bytes = 0;  // in the file now, since its last rotation
  };
  std::string logs_dir_;  // RECORD/output; empty: nothing kept
  UniqueFd logs_fd_;
  UniqueFd record_fd_;  // RECORD
  std::string record_dir_;
  std::vector<UniqueFd> attempt_fds_;  // every attempt's, kept open: the
                                       // FileWriter knows folders by number
  int attempt_ = -1;
  std::size_t rank_log_bytes_ = 0;
  std::map<int, RankLog> rank_logs_;  // this attempt's
  std::map<int, std::deque<std::string>> tails_;
  std::map<int, bool> tail_open_;  // the last tail line of a rank awaits its newline
  void remember_tail(int rank, std::string_view data, bool partial);
  std::string batch_;
};

}  // namespace dlaunch
