// --signal SIG[@SECONDS] (launcher/cli/options.h).
#include <signal.h>

#include <gtest/gtest.h>

#include "cli/options.h"

using dlaunch::parse_signal_spec;
using dlaunch::signal_number;

TEST(SignalSpec, NamesWithOrWithoutSigAndNumbers) {
  EXPECT_EQ(signal_number("USR1"), SIGUSR1);
  EXPECT_EQ(signal_number("SIGUSR2"), SIGUSR2);
  EXPECT_EQ(signal_number("sigterm"), SIGTERM);
  EXPECT_EQ(signal_number("10"), 10);
  EXPECT_EQ(signal_number("0"), 0);
  EXPECT_EQ(signal_number("65"), 0);
  EXPECT_EQ(signal_number("SIG"), 0);
  EXPECT_EQ(signal_number("USR3"), 0);
  EXPECT_EQ(signal_number(""), 0);
}

TEST(SignalSpec, SecondsDefaultToSixty) {
  EXPECT_EQ(parse_signal_spec("USR1").signal, SIGUSR1);
  EXPECT_EQ(parse_signal_spec("USR1").seconds, 60);
  EXPECT_EQ(parse_signal_spec("SIGUSR2@120").seconds, 120);
  EXPECT_EQ(parse_signal_spec("12@5").signal, 12);
}

TEST(SignalSpec, BadSpecsAreInputErrorsNamingTheFlag) {
  for (const char* bad : {"", "@5", "FOO", "USR1@", "USR1@0", "USR1@-1", "USR1@1.5", "USR1@x",
                          "USR1@65536", "KILL", "SIGSTOP@5", "USR1@5@6"}) {
    try {
      parse_signal_spec(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const dlaunch::InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--signal"), std::string::npos) << e.what();
    }
  }
}
