// Semantics of every Store operation against a live server.
#include <chrono>
#include <functional>
#include <limits>
#include <thread>

#include <gtest/gtest.h>

#include "store_test_support.h"

namespace {

using namespace std::chrono_literals;
using store_test::client_options;
using store_test::server_options;

class StoreApi : public ::testing::Test {
 protected:
  dlaunch::comm::ThreadedStoreServer server{server_options()};
  dlaunch::comm::Store store{client_options(server.port())};
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dlaunch::comm::StoreError& e) {
    return e.what();
  }
  return "(no StoreError)";
}

// The kind of the StoreError f throws (kInternal when it throws none).
dlaunch::comm::ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dlaunch::comm::StoreError& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no StoreError";
  return dlaunch::comm::ErrorKind::kInternal;
}

}  // namespace

TEST_F(StoreApi, SetThenGetReturnsTheValueIncludingBinaryAndEmpty) {
  store.set("a", "1");
  EXPECT_EQ(store.get("a"), "1");
  store.set("a", "2");
  EXPECT_EQ(store.get("a"), "2");
  std::string binary("x\0y\xff", 4);
  store.set(binary, binary);
  EXPECT_EQ(store.get(binary), binary);
  store.set("empty", "");
  EXPECT_EQ(store.get("empty"), "");
}

// Keys given to the server are there for its very first client, and are
// keys like any other after that.
TEST(StoreInitialKeys, TheFirstClientFindsThemAndCanChangeThem) {
  auto so = server_options();
  so.initial_keys = {{"who", "node 1"}, {"n", "41"}};
  dlaunch::comm::ThreadedStoreServer server{so};
  dlaunch::comm::Store store{client_options(server.port())};
  EXPECT_TRUE(store.check({"who", "n"}));
  EXPECT_EQ(store.get("who"), "node 1");
  EXPECT_EQ(store.add("n", 1), 42);
  EXPECT_TRUE(store.delete_key("who"));
  EXPECT_FALSE(store.check({"who"}));
  EXPECT_EQ(store.num_keys(), 1);
}

TEST_F(StoreApi, AddCreatesTheCounterAtZeroAndReturnsTheNewValue) {
  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.add("n", -7), -2);
  EXPECT_EQ(store.add("n", 0), -2);
  EXPECT_EQ(store.get("n"), "-2");
}

TEST_F(StoreApi, AddOnANonIntegerValueFailsAndTheConnectionStaysUsable) {
  store.set("text", "hello");
  std::string what = error_of([&] { store.add("text", 1); });
  EXPECT_NE(what.find("add(\"text\", 1) failed"), std::string::npos) << what;
  EXPECT_NE(what.find("not a decimal integer"), std::string::npos) << what;
  EXPECT_EQ(store.get("text"), "hello");
}

TEST_F(StoreApi, AddThatWouldOverflowFails) {
  store.add("big", std::numeric_limits<int64_t>::max());
  EXPECT_THROW(store.add("big", 1), dlaunch::comm::StoreError);
  EXPECT_EQ(store.add("big", -1), std::numeric_limits<int64_t>::max() - 1);
}

TEST_F(StoreApi, CompareSetSwapsOnlyWhenTheCurrentValueMatches) {
  EXPECT_EQ(store.compare_set("k", "x", "y"), "");  // missing, expected not empty: untouched
  EXPECT_FALSE(store.check({"k"}));
  EXPECT_EQ(store.compare_set("k", "", "first"), "first");  // missing matches empty
  EXPECT_EQ(store.compare_set("k", "wrong", "second"), "first");
  EXPECT_EQ(store.compare_set("k", "first", "second"), "second");
  EXPECT_EQ(store.get("k"), "second");
}

TEST_F(StoreApi, CheckTellsWhetherAllKeysExistWithoutWaiting) {
  EXPECT_TRUE(store.check({}));
  EXPECT_FALSE(store.check({"a"}));
  store.set("a", "1");
  EXPECT_TRUE(store.check({"a"}));
  EXPECT_FALSE(store.check({"a", "b"}));
  store.set("b", "2");
  EXPECT_TRUE(store.check({"a", "b"}));
}

TEST_F(StoreApi, DeleteKeyReportsWhetherTheKeyExisted) {
  store.set("a", "1");
  EXPECT_TRUE(store.delete_key("a"));
  EXPECT_FALSE(store.delete_key("a"));
  EXPECT_FALSE(store.check({"a"}));
}

TEST_F(StoreApi, NumKeysCountsTheStoredKeys) {
  EXPECT_EQ(store.num_keys(), 0);
  store.set("a", "1");
  store.add("b", 1);
  store.multi_set({"c", "d"}, {"3", "4"});
  EXPECT_EQ(store.num_keys(), 4);
  store.delete_key("a");
  EXPECT_EQ(store.num_keys(), 3);
}

TEST_F(StoreApi, ErrorsSayWhoseProblemTheyAre) {
  using dlaunch::comm::ErrorKind;
  store.set("text", "hello");
  EXPECT_EQ(kind_of([&] { store.add("text", 1); }), ErrorKind::kUsage);
  EXPECT_EQ(kind_of([&] { store.multi_set({"a", "b"}, {"1"}); }), ErrorKind::kUsage);
  EXPECT_EQ(kind_of([&] { store.set(std::string(5000, 'k'), "v"); }), ErrorKind::kUsage);
  EXPECT_EQ(kind_of([&] { store.barrier("b", 0, 1s); }), ErrorKind::kUsage);
  EXPECT_EQ(kind_of([&] { store.get("never", 10ms); }), ErrorKind::kEnvironment);
  EXPECT_EQ(kind_of([&] { store.barrier("alone", 2, 10ms); }), ErrorKind::kEnvironment);
  // Every one of them is a comm::Error, and the connection survived them all.
  EXPECT_THROW(store.add("text", 1), dlaunch::comm::Error);
  EXPECT_EQ(store.get("text"), "hello");
  EXPECT_EQ(server.connections(), 1u);
}

TEST_F(StoreApi, MultiSetThenMultiGetKeepsTheOrderOfKeys) {
  store.multi_set({"x", "y", "z"}, {"1", "2", "3"});
  EXPECT_EQ(store.multi_get({"z", "x", "y"}), (std::vector<std::string>{"3", "1", "2"}));
  EXPECT_TRUE(store.multi_get({}).empty());
  EXPECT_THROW(store.multi_set({"a", "b"}, {"1"}), dlaunch::comm::StoreError);
}

TEST_F(StoreApi, GetTimesOutWithAnErrorNamingTheKeyAndTheAddress) {
  auto start = std::chrono::steady_clock::now();
  std::string what = error_of([&] { store.get("rank3/addr", 200ms); });
  auto took = std::chrono::steady_clock::now() - start;
  std::string expected = "store 127.0.0.1:" + std::to_string(server.port()) +
                         ": get(\"rank3/addr\") timed out after 0.2 s";
  EXPECT_EQ(what, expected);
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 5s);
}

TEST_F(StoreApi, WaitTimesOutNamingTheKeysStillMissing) {
  store.set("here", "1");
  std::string what = error_of([&] { store.wait({"here", "gone"}, 100ms); });
  EXPECT_NE(what.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << what;
  EXPECT_NE(
      what.find("wait([\"here\", \"gone\"]) timed out after 0.1 s; still missing: [\"gone\"]"),
      std::string::npos)
      << what;
}

TEST_F(StoreApi, MultiGetTimesOutUsingTheDefaultTimeout) {
  auto opts = client_options(server.port());
  opts.timeout = 100ms;
  dlaunch::comm::Store impatient(opts);
  std::string what = error_of([&] { impatient.multi_get({"nope"}); });
  EXPECT_NE(what.find("multi_get([\"nope\"]) timed out after 0.1 s"), std::string::npos) << what;
}

TEST_F(StoreApi, TheConnectionStaysUsableAfterATimeout) {
  EXPECT_THROW(store.get("late", 50ms), dlaunch::comm::StoreError);
  store.set("late", "now");
  EXPECT_EQ(store.get("late", 50ms), "now");
}

TEST_F(StoreApi, ZeroTimeoutReturnsExistingKeysAndFailsOnMissingOnes) {
  store.set("a", "1");
  EXPECT_EQ(store.get("a", 0ms), "1");
  EXPECT_THROW(store.get("b", 0ms), dlaunch::comm::StoreError);
  EXPECT_NO_THROW(store.wait({}, 0ms));
}

TEST_F(StoreApi, OversizedKeyIsRefusedByTheClientAndTheConnectionSurvives) {
  std::string what = error_of([&] { store.set(std::string(5000, 'k'), "v"); });
  EXPECT_NE(what.find("the key is 5000 bytes, over the store's limit of 4096"), std::string::npos)
      << what;
  store.set("after", "ok");
  EXPECT_EQ(store.get("after"), "ok");
  EXPECT_EQ(server.connections(), 1u);
}

TEST(StoreLimits, OversizedValueIsRefusedByTheClient) {
  auto so = server_options();
  so.max_value_bytes = 1000;
  dlaunch::comm::ThreadedStoreServer server(so);
  dlaunch::comm::Store store(client_options(server.port()));
  EXPECT_THROW(store.set("k", std::string(1001, 'v')), dlaunch::comm::StoreError);
  EXPECT_THROW(store.compare_set("k", "", std::string(1001, 'v')), dlaunch::comm::StoreError);
  store.set("k", std::string(1000, 'v'));
  EXPECT_EQ(store.get("k").size(), 1000u);
}

TEST(StoreLimits, LargeValuesRoundTrip) {
  dlaunch::comm::ThreadedStoreServer server(server_options());
  dlaunch::comm::Store store(client_options(server.port()));
  std::string big(8 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131);
  store.set("big", big);
  EXPECT_EQ(store.get("big"), big);
  EXPECT_EQ(store.multi_get({"big", "big"}), (std::vector<std::string>{big, big}));
}

namespace {

// Whether `key` is gone within 5 s (the server erases it when it sees the
// connection close, on its own thread).
bool gone_soon(dlaunch::comm::Store& s, const std::string& key) {
  for (int i = 0; i < 500; ++i) {
    if (!s.check({key})) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace

TEST_F(StoreApi, AKeySetWhileConnectedGoesWithItsConnection) {
  {
    dlaunch::comm::Store other{client_options(server.port())};
    other.set_while_connected("alive/1", "host-b pid 42");
    other.set("plain", "stays");
    EXPECT_EQ(store.get("alive/1"), "host-b pid 42");
  }
  EXPECT_TRUE(gone_soon(store, "alive/1"));
  EXPECT_EQ(store.get("plain"), "stays");
}

TEST_F(StoreApi, AKeySetAnewByAnotherConnectionOutlivesTheFirst) {
  {
    dlaunch::comm::Store other{client_options(server.port())};
    other.set_while_connected("k", "first");
    other.set_while_connected("mine", "x");
    store.set("k", "second");
  }
  EXPECT_TRUE(gone_soon(store, "mine"));
  EXPECT_EQ(store.get("k"), "second");
}
