// Every collective of the MPI ProcessGroup with every data type and op it
// takes, point to point, and the split paths for counts above what one MPI
// call carries (exercised by lowering that limit).
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/mpi/mpi_process_group.h"
#include "mpi_test_support.h"

namespace comm_test {
namespace {

using dlaunch::comm::DataType;
using dlaunch::comm::ReduceOp;

const std::size_t kCounts[] = {0, 1, 7, 1000, 65537};

class AllReduce : public MpiTest,
                  public ::testing::WithParamInterface<std::tuple<DataType, ReduceOp>> {};

TEST_P(AllReduce, EveryRankGetsTheReduction) {
  // Not a structured binding: clang 14 cannot capture one in the lambda below.
  const auto type = std::get<0>(GetParam());
  const auto op = std::get<1>(GetParam());
  const int n = pg().size();
  with_type(type, [&]<typename T>() {
    for (const std::size_t count : kCounts) {
      auto buf = values<T>(pg().rank(), count);
      pg().all_reduce(buf.data(), count, type, op);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) wrong += buf[i] != expected<T>(op, n, i);
      EXPECT_EQ(wrong, 0u) << count << " elements; first: " << (count ? +buf[0] : T{}) << " vs "
                           << (count ? +expected<T>(op, n, 0) : T{});
    }
  });
}

TEST_P(AllReduce, TypedSpanOverload) {
  const auto type = std::get<0>(GetParam());
  const auto op = std::get<1>(GetParam());
  with_type(type, [&]<typename T>() {
    auto buf = values<T>(pg().rank(), 33);
    pg().all_reduce(std::span<T>(buf), op);
    for (std::size_t i = 0; i < buf.size(); ++i) EXPECT_EQ(buf[i], expected<T>(op, pg().size(), i));
  });
}

class ReduceScatter : public MpiTest,
                      public ::testing::WithParamInterface<std::tuple<DataType, ReduceOp>> {};

TEST_P(ReduceScatter, EachRankGetsItsBlockOfTheReduction) {
  const auto type = std::get<0>(GetParam());
  const auto op = std::get<1>(GetParam());
  const int n = pg().size();
  const int me = pg().rank();
  with_type(type, [&]<typename T>() {
    for (const std::size_t count : kCounts) {
      const auto send = values<T>(me, count * static_cast<std::size_t>(n));
      std::vector<T> recv(count, T{-99});
      pg().reduce_scatter(send.data(), recv.data(), count, type, op);
      std::size_t wrong = 0;
      for (std::size_t j = 0; j < count; ++j) {
        wrong += recv[j] != expected<T>(op, n, static_cast<std::size_t>(me) * count + j);
      }
      EXPECT_EQ(wrong, 0u) << count << " elements";
    }
    // Typed overload.
    const auto send = values<T>(me, 5 * static_cast<std::size_t>(n));
    std::vector<T> recv(5);
    pg().reduce_scatter(std::span<const T>(send), std::span<T>(recv), op);
    for (std::size_t j = 0; j < 5; ++j) {
      EXPECT_EQ(recv[j], expected<T>(op, n, static_cast<std::size_t>(me) * 5 + j));
    }
  });
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<DataType, ReduceOp>>& info) {
  return std::string(dlaunch::comm::to_string(std::get<0>(info.param))) + "_" +
         dlaunch::comm::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Types, AllReduce,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllOps)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Types, ReduceScatter,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllOps)),
                         param_name);

class Typed : public MpiTest, public ::testing::WithParamInterface<DataType> {};

TEST_P(Typed, BroadcastFromEveryRootIncludingTheLast) {
  const DataType type = GetParam();
  const int n = pg().size();
  with_type(type, [&]<typename T>() {
    // The last rank first: a non-zero root whenever there is more than one rank.
    for (int root = n - 1; root >= 0; --root) {
      for (const std::size_t count : kCounts) {
        auto buf = pg().rank() == root ? values<T>(root, count) : std::vector<T>(count, T{-99});
        pg().broadcast(buf.data(), count, type, root);
        EXPECT_EQ(buf, values<T>(root, count)) << "root " << root << ", " << count << " elements";
      }
    }
    auto buf = pg().rank() == n - 1 ? values<T>(n - 1, 9) : std::vector<T>(9);
    pg().broadcast(std::span<T>(buf), n - 1);
    EXPECT_EQ(buf, values<T>(n - 1, 9));
  });
}

TEST_P(Typed, AllGatherPutsRankRAtBlockR) {
  const DataType type = GetParam();
  const int n = pg().size();
  with_type(type, [&]<typename T>() {
    for (const std::size_t count : kCounts) {
      const auto send = values<T>(pg().rank(), count);
      std::vector<T> recv(count * static_cast<std::size_t>(n), T{-99});
      pg().all_gather(send.data(), recv.data(), count, type);
      for (int r = 0; r < n; ++r) {
        const auto begin = recv.begin() + static_cast<std::ptrdiff_t>(count) * r;
        EXPECT_EQ(std::vector<T>(begin, begin + static_cast<std::ptrdiff_t>(count)),
                  values<T>(r, count))
            << "block " << r << ", " << count << " elements";
      }
    }
  });
}

TEST_P(Typed, AllGatherInPlace) {
  const DataType type = GetParam();
  const int n = pg().size();
  const std::size_t count = 1001;
  with_type(type, [&]<typename T>() {
    std::vector<T> buf(count * static_cast<std::size_t>(n), T{-99});
    const auto mine = values<T>(pg().rank(), count);
    std::copy(mine.begin(), mine.end(),
              buf.begin() + static_cast<std::ptrdiff_t>(count) * pg().rank());
    pg().all_gather(buf.data() + count * static_cast<std::size_t>(pg().rank()), buf.data(), count,
                    type);
    for (int r = 0; r < n; ++r) {
      const auto begin = buf.begin() + static_cast<std::ptrdiff_t>(count) * r;
      EXPECT_EQ(std::vector<T>(begin, begin + static_cast<std::ptrdiff_t>(count)),
                values<T>(r, count));
    }
    // Typed overload.
    std::vector<T> all(3 * static_cast<std::size_t>(n));
    pg().all_gather(std::span<const T>(values<T>(pg().rank(), 3)), std::span<T>(all));
    EXPECT_EQ(std::vector<T>(all.begin(), all.begin() + 3), values<T>(0, 3));
  });
}

TEST_P(Typed, SendRecvRing) {
  const DataType type = GetParam();
  const int n = pg().size();
  const int me = pg().rank();
  if (n < 2) GTEST_SKIP() << "a ring needs two ranks";
  const int next = (me + 1) % n;
  const int prev = (me + n - 1) % n;
  with_type(type, [&]<typename T>() {
    // 0: an empty message is still a message; 1 << 20: beyond any eager limit.
    for (const std::size_t count : {std::size_t{0}, std::size_t{1000}, std::size_t{1} << 20}) {
      const auto out = values<T>(me, count);
      std::vector<T> in(count, T{-99});
      // Even ranks send first, odd ranks receive first: no cycle of blocked sends.
      if (me % 2 == 0) {
        pg().send(out.data(), count, type, next, 7);
        pg().recv(in.data(), count, type, prev, 7);
      } else {
        pg().recv(in.data(), count, type, prev, 7);
        pg().send(out.data(), count, type, next, 7);
      }
      EXPECT_EQ(in, values<T>(prev, count)) << count << " elements";
    }
    // Typed overloads, and two tags between one pair arriving in order per tag.
    const auto a = values<T>(me, 4), b = values<T>(me + 10, 4);
    std::vector<T> got_a(4), got_b(4);
    if (me % 2 == 0) {
      pg().send(std::span<const T>(a), next, 1);
      pg().send(std::span<const T>(b), next, 2);
      pg().recv(std::span<T>(got_b), prev, 2);
      pg().recv(std::span<T>(got_a), prev, 1);
    } else {
      pg().recv(std::span<T>(got_b), prev, 2);
      pg().recv(std::span<T>(got_a), prev, 1);
      pg().send(std::span<const T>(a), next, 1);
      pg().send(std::span<const T>(b), next, 2);
    }
    EXPECT_EQ(got_a, values<T>(prev, 4));
    EXPECT_EQ(got_b, values<T>(prev + 10, 4));
  });
}

std::string type_name(const ::testing::TestParamInfo<DataType>& info) {
  return dlaunch::comm::to_string(info.param);
}

INSTANTIATE_TEST_SUITE_P(Types, Typed, ::testing::ValuesIn(kAllTypes), type_name);

using Collectives = MpiTest;

TEST_F(Collectives, BarrierWaitsForTheLastRank) {
  if (pg().size() < 2) GTEST_SKIP() << "needs two ranks";
  pg().barrier();
  const auto start = std::chrono::steady_clock::now();
  if (pg().rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pg().barrier();
  const auto waited = std::chrono::steady_clock::now() - start;
  if (pg().rank() != 0) {
    // Rank 0 slept 300 ms after the first barrier: nobody leaves the second
    // much earlier (allowing for skew in leaving the first one).
    EXPECT_GE(waited, std::chrono::milliseconds(150));
  }
}

TEST_F(Collectives, LargeAllReduceAbove16MiB) {
  const int n = pg().size();
  const int me = pg().rank();
  {
    const std::size_t count = (std::size_t{20} << 20) / sizeof(float) + 3;  // 20 MiB + 12 B
    std::vector<float> buf(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((me + 1) * (i % 1024));
    pg().all_reduce(std::span<float>(buf), ReduceOp::kSum);
    const auto ranks = static_cast<float>(n) * static_cast<float>(n + 1) / 2.0F;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) wrong += buf[i] != ranks * static_cast<float>(i % 1024);
    EXPECT_EQ(wrong, 0u);
  }
  {
    const std::size_t count = (std::size_t{24} << 20) / sizeof(std::int64_t);  // 24 MiB
    std::vector<std::int64_t> buf(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<std::int64_t>(i) * (me + 1) - me;
    pg().all_reduce(std::span<std::int64_t>(buf), ReduceOp::kAvg);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      std::int64_t sum = 0;
      for (int r = 0; r < n; ++r) sum += static_cast<std::int64_t>(i) * (r + 1) - r;
      wrong += buf[i] != sum / n;
    }
    EXPECT_EQ(wrong, 0u);
  }
}

TEST_F(Collectives, SecondGroupWhileTheFirstLives) {
  auto other = dlaunch::comm::ProcessGroup::create(dlaunch::comm::Backend::kMpi);
  EXPECT_EQ(other->rank(), pg().rank());
  EXPECT_EQ(other->size(), pg().size());
  int x = pg().rank() + 1;
  other->all_reduce(std::span<int>(&x, 1), ReduceOp::kSum);
  EXPECT_EQ(x, pg().size() * (pg().size() + 1) / 2);
  other.reset();  // must not finalise MPI under the first group
  int y = 1;
  pg().all_reduce(std::span<int>(&y, 1), ReduceOp::kSum);
  EXPECT_EQ(y, pg().size());
}

TEST_F(Collectives, IdentityMatchesMpirun) {
  EXPECT_EQ(pg().backend(), dlaunch::comm::Backend::kMpi);
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) {
    EXPECT_EQ(pg().rank(), std::atoi(r));
  }
  if (const char* s = std::getenv("OMPI_COMM_WORLD_SIZE")) {
    EXPECT_EQ(pg().size(), std::atoi(s));
  }
  const char* local = std::getenv("LOCAL_RANK");
  if (local == nullptr) local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_EQ(pg().local_rank(), local ? std::atoi(local) : 0);
}

// Lowers the per-call element limit so that small buffers take the paths
// that counts above INT_MAX take; restores it at the end.
class Split : public MpiTest {
 protected:
  static constexpr std::size_t kLimit = 1000;
  void SetUp() override {
    mpi_ = dynamic_cast<dlaunch::comm::mpi::MpiProcessGroup*>(&pg());
    ASSERT_NE(mpi_, nullptr);
    saved_ = mpi_->max_count_per_call();
    mpi_->set_max_count_per_call_for_testing(kLimit);
  }
  void TearDown() override {
    if (mpi_ != nullptr) mpi_->set_max_count_per_call_for_testing(saved_);
    MpiTest::TearDown();
  }
  dlaunch::comm::mpi::MpiProcessGroup* mpi_ = nullptr;
  std::size_t saved_ = 0;
};

TEST_F(Split, AllReduceInPieces) {
  const int n = pg().size();
  for (const ReduceOp op : kAllOps) {
    auto f = values<float>(pg().rank(), 10007);
    pg().all_reduce(std::span<float>(f), op);
    auto l = values<std::int64_t>(pg().rank(), kLimit * 3);  // an exact multiple
    pg().all_reduce(std::span<std::int64_t>(l), op);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < f.size(); ++i) wrong += f[i] != expected<float>(op, n, i);
    for (std::size_t i = 0; i < l.size(); ++i) wrong += l[i] != expected<std::int64_t>(op, n, i);
    EXPECT_EQ(wrong, 0u) << dlaunch::comm::to_string(op);
  }
}

TEST_F(Split, BroadcastInPieces) {
  const int root = pg().size() - 1;
  auto buf = pg().rank() == root ? values<double>(root, 4321) : std::vector<double>(4321);
  pg().broadcast(std::span<double>(buf), root);
  EXPECT_EQ(buf, values<double>(root, 4321));
}

TEST_F(Split, AllGatherInPieces) {
  const int n = pg().size();
  // 2500 per rank: each block takes several pieces; 300 per rank: the whole
  // (300 * size) is over the limit once there are four ranks.
  for (const std::size_t count : {std::size_t{2500}, std::size_t{300}}) {
    const auto send = values<std::int32_t>(pg().rank(), count);
    std::vector<std::int32_t> recv(count * static_cast<std::size_t>(n), -99);
    pg().all_gather(std::span<const std::int32_t>(send), std::span<std::int32_t>(recv));
    for (int r = 0; r < n; ++r) {
      const auto begin = recv.begin() + static_cast<std::ptrdiff_t>(count) * r;
      EXPECT_EQ(std::vector<std::int32_t>(begin, begin + static_cast<std::ptrdiff_t>(count)),
                values<std::int32_t>(r, count))
          << "block " << r << " of " << count;
    }
    // In place.
    std::vector<std::int32_t> buf(count * static_cast<std::size_t>(n), -99);
    std::copy(send.begin(), send.end(),
              buf.begin() + static_cast<std::ptrdiff_t>(count) * pg().rank());
    pg().all_gather(buf.data() + count * static_cast<std::size_t>(pg().rank()), buf.data(), count,
                    DataType::kInt32);
    EXPECT_EQ(buf, recv);
  }
}

TEST_F(Split, ReduceScatterInPieces) {
  const int n = pg().size();
  const int me = pg().rank();
  for (const std::size_t count : {std::size_t{2500}, std::size_t{300}}) {
    for (const ReduceOp op : kAllOps) {
      const auto send = values<float>(me, count * static_cast<std::size_t>(n));
      std::vector<float> recv(count, -99);
      pg().reduce_scatter(std::span<const float>(send), std::span<float>(recv), op);
      std::size_t wrong = 0;
      for (std::size_t j = 0; j < count; ++j) {
        wrong += recv[j] != expected<float>(op, n, static_cast<std::size_t>(me) * count + j);
      }
      EXPECT_EQ(wrong, 0u) << count << " elements, " << dlaunch::comm::to_string(op);
    }
  }
}

TEST_F(Split, SendRecvInPieces) {
  const int n = pg().size();
  const int me = pg().rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  const std::size_t count = kLimit * 2 + 17;
  const auto out = values<std::int64_t>(me, count);
  std::vector<std::int64_t> in(count);
  if (me % 2 == 0) {
    pg().send(std::span<const std::int64_t>(out), (me + 1) % n, 3);
    pg().recv(std::span<std::int64_t>(in), (me + n - 1) % n, 3);
  } else {
    pg().recv(std::span<std::int64_t>(in), (me + n - 1) % n, 3);
    pg().send(std::span<const std::int64_t>(out), (me + 1) % n, 3);
  }
  EXPECT_EQ(in, values<std::int64_t>((me + n - 1) % n, count));
}

}  // namespace
}  // namespace comm_test
