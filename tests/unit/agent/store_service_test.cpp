// Node 0's comm store as a node service (agent/store_service.h), without an
// agent: made at Setup when the head gives a secret (TCP and a Unix socket in
// the node's folder, both in Ready), refused with the reason when it cannot
// listen, gone at the end. A real StoreServer on loopback.
#include "store_service.h"

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "dlaunch/private_dir.h"
#include "fake_node.h"
#include "loopback.h"

namespace {

namespace proto = dlaunch::proto;
using dlaunch::agent::StoreService;

// Node 0's Setup: the job's store secret, the address to listen on.
proto::Setup node0_setup(const std::string& bind) {
  return proto::Setup{.store_secret = "s3cret-of-the-job", .store_bind = bind};
}

class StoreServiceTest : public ::testing::Test {
 protected:
  // The node's folder, as the agent makes it (dlaunch/private_dir.h).
  void SetUp() override { node_.dir = dlaunch::make_private_dir("/tmp", "dlaunch-store-service-"); }
  void TearDown() override { std::filesystem::remove_all(node_.dir); }

  boost::asio::io_context io_;
  dltest::FakeNode node_;
};

TEST_F(StoreServiceTest, WithTheJobsSecretTheStoreListensOnTcpAndInTheNodesFolder) {
  StoreService service(io_, node_);
  proto::Ready ready;
  ASSERT_EQ(service.prepare(node0_setup("127.0.0.1"), ready), std::nullopt);
  ASSERT_NE(ready.store_port, 0);
  EXPECT_EQ(ready.store_path, node_.dir + "/store.sock");
  struct stat st {};
  ASSERT_EQ(::stat(ready.store_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_TRUE(dltest::loopback_accepts(ready.store_port));
  service.stop();
  EXPECT_FALSE(dltest::loopback_accepts(ready.store_port));
  EXPECT_NE(::stat(ready.store_path.c_str(), &st), 0);  // the socket's file goes with it
  EXPECT_TRUE(node_.sent.empty());
}

TEST_F(StoreServiceTest, WithoutASecretThereIsNoStore) {
  StoreService service(io_, node_);
  proto::Ready ready;
  EXPECT_EQ(service.prepare(proto::Setup{}, ready), std::nullopt);
  EXPECT_EQ(ready.store_port, 0);
  EXPECT_EQ(ready.store_path, "");
}

TEST_F(StoreServiceTest, AnAddressThatIsNotThisMachinesRefusesTheNodeWithTheReason) {
  StoreService service(io_, node_);
  proto::Ready ready;
  // TEST-NET-3 (RFC 5737): no machine's own; the bind fails, nothing is sent.
  const auto refused = service.prepare(node0_setup("203.0.113.7"), ready);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->rfind("cannot start the comm store: ", 0), 0u) << *refused;
  EXPECT_EQ(ready.store_port, 0);
}

TEST_F(StoreServiceTest, AFolderTooDeepForASocketPathGivesTcpOnly) {
  node_.dir += "/" + std::string(100, 'd');
  StoreService service(io_, node_);
  proto::Ready ready;
  ASSERT_EQ(service.prepare(node0_setup("127.0.0.1"), ready), std::nullopt);
  EXPECT_NE(ready.store_port, 0);
  EXPECT_EQ(ready.store_path, "");
}

}  // namespace
