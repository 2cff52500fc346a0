#pragma once

// The backend-neutral conformance suite of storage::Storage (storage_conformance.cpp). A backend
// instantiates it with a factory:
//
//   INSTANTIATE_TEST_SUITE_P(Sqlite, StorageConformance,
//                            testing::Values(fg::storage::testing::Backend{"sqlite", fresh}),
//                            fg::storage::testing::backend_name);
//
// `fresh()` makes a new, empty database and returns an opener: each call of the opener is one
// more Storage (one more "gateway") on that same database. An empty opener skips the suite (the
// backend's server is not available here).

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "orchestrator/storage/storage.hpp"

namespace fg::storage::testing {

using Opener = std::function<std::unique_ptr<Storage>()>;

struct Backend {
  std::string name;
  std::function<Opener()> fresh;
};

inline std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  return info.param.name;
}
inline void PrintTo(const Backend& backend, std::ostream* os) {
  *os << backend.name;
}

class StorageConformance : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override;
  // One more Storage on the same database (another gateway).
  std::unique_ptr<Storage> open_again() { return open_(); }

  Opener open_;
  std::unique_ptr<Storage> db_;
};

}  // namespace fg::storage::testing
