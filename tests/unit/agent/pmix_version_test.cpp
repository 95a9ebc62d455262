// Which PMIx a library is and what the agent makes of an image's against its
// own server's (agent/pmix/pmix_version.h): the words real libraries carry,
// and the judgement, without a container.
#include "pmix/pmix_version.h"

#include <fcntl.h>

#include <string>

#include <gtest/gtest.h>

namespace dlaunch::agent {
namespace {

using namespace std::string_literals;

TEST(PmixVersion, TheWordsOfRealLibrariesAreRead) {
  // Debian 12's libpmix.so.2 (PMIx_Get_version's text).
  auto v = parse_pmix_version("junk\0OpenPMIx 4.2.2rc2 (PMIx Standard: 4.2, Stable ABI: 0.0)\0"s);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->major, 4);
  EXPECT_EQ(v->minor, 2);
  EXPECT_EQ(v->patch, 2);
  EXPECT_EQ(v->text, "4.2.2rc2");
  // Debian 11's 4.0.0 says it only in its components' lines; the sentence
  // that names OpenPMIx without a version is not one.
  v = parse_pmix_version(
      "compiled for a different version of OpenPMIx\0PMIx version of contactor\0"
      "PMIX pdl pdlopen MCA component version 4.0.0rc3\0"s);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->text, "4.0.0rc3");
  // PMIx 3's own words.
  v = parse_pmix_version("\0PMIx v3.1.5\0"s);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->major, 3);
  EXPECT_EQ(v->minor, 1);
  // Another component's version is not PMIx's.
  EXPECT_FALSE(parse_pmix_version("\0MCA btl tcp MCA component version 4.1.4\0"s));
  EXPECT_FALSE(parse_pmix_version("no version here"));
  EXPECT_FALSE(pmix_version_in_file(-1));
}

TEST(PmixVersion, TheHostsOwnLibraryIsReadWhereItIs) {
  const int fd = ::open("/usr/lib/x86_64-linux-gnu/libpmix.so.2", O_RDONLY | O_CLOEXEC);
  if (fd < 0) GTEST_SKIP() << "no libpmix.so.2 here (libpmix2)";
  const auto v = pmix_version_in_file(fd);
  ASSERT_TRUE(v);
  EXPECT_GE(v->major, 2);
}

TEST(PmixVersion, AnImagesPmixIsJudgedAgainstTheServers) {
  const PmixVersion server{.major = 4, .minor = 2, .patch = 2, .text = "4.2.2"};
  // The same release: nothing to say.
  auto j = judge_image_pmix(server, PmixVersion{4, 2, 5, "4.2.5"}, "/usr/lib/libpmix.so.2", "img");
  EXPECT_TRUE(j.refusal.empty());
  EXPECT_TRUE(j.note.empty());
  EXPECT_FALSE(j.gds_hash);
  // Another that PMIx serves: said, with a store both can use.
  j = judge_image_pmix(server, PmixVersion{4, 0, 0, "4.0.0rc3"}, "/usr/lib/libpmix.so.2", "img");
  EXPECT_TRUE(j.refusal.empty());
  EXPECT_NE(j.note.find("the image img has PMIx 4.0.0rc3 (/usr/lib/libpmix.so.2)"),
            std::string::npos)
      << j.note;
  EXPECT_NE(j.note.find("this node's PMIx server is 4.2.2"), std::string::npos) << j.note;
  EXPECT_TRUE(j.gds_hash);
  j = judge_image_pmix(server, PmixVersion{3, 1, 5, "3.1.5"}, "/opt/x/mca_pmix_pmix3x.so", "img");
  EXPECT_TRUE(j.refusal.empty());
  EXPECT_TRUE(j.gds_hash);
  // Older than 2.1: no server serves it; the job does not start.
  j = judge_image_pmix(server, PmixVersion{2, 0, 3, "2.0.3"}, "/usr/lib64/libpmix.so.2", "old");
  EXPECT_NE(j.refusal.find("PMIx 2.0.3"), std::string::npos) << j.refusal;
  EXPECT_NE(j.refusal.find("2.1 and later"), std::string::npos) << j.refusal;
  j = judge_image_pmix(server, PmixVersion{1, 2, 5, "1.2.5"}, "/usr/lib64/libpmix.so.2", "old");
  EXPECT_FALSE(j.refusal.empty());
  // None found: said, nothing refused (the program may not be an MPI one).
  j = judge_image_pmix(server, std::nullopt, "", "busybox");
  EXPECT_TRUE(j.refusal.empty());
  EXPECT_NE(j.note.find("no PMIx library"), std::string::npos) << j.note;
  EXPECT_FALSE(j.gds_hash);
}

TEST(PmixVersion, TheSystemsLibraryIsLookedForFirst) {
  const auto c = image_pmix_candidates();
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.front(), "/usr/lib/x86_64-linux-gnu/libpmix.so.2");
}

}  // namespace
}  // namespace dlaunch::agent
