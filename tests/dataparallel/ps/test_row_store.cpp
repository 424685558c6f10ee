// The row store under a parameter-server table's lock stripe: random inserts, lookups and erases
// against std::unordered_map (erases exercise the backward shift across long probe runs and the
// reuse of freed slots), rows that keep their address while the index grows, and a small index
// where every erase shifts a probe run back.
#include <random>
#include <unordered_map>

#include <boost/test/unit_test.hpp>

#include "dataparallel/ps/row_store.h"

using pw::dp::RowStore;

namespace {

constexpr std::size_t kFloats = 3;

void write_row(RowStore& store, RowStore::Slot s, std::int64_t key) {
  for (std::size_t j = 0; j < kFloats; ++j) store.values(s)[j] = static_cast<float>(key % 1000003) + static_cast<float>(j);
  store.steps(s) = key;
}

bool row_is(const RowStore& store, RowStore::Slot s, std::int64_t key) {
  for (std::size_t j = 0; j < kFloats; ++j)
    if (store.values(s)[j] != static_cast<float>(key % 1000003) + static_cast<float>(j)) return false;
  return store.steps(s) == key;
}

}  // namespace

BOOST_AUTO_TEST_CASE(random_inserts_lookups_and_erases_match_a_reference_map) {
  RowStore store;
  store.reset(kFloats);
  std::unordered_map<std::int64_t, bool> reference;
  std::mt19937_64 rng(7);
  // A small key range, so that keys come back after their erase and probe runs get long.
  std::uniform_int_distribution<std::int64_t> key_of(-5000, 5000);
  for (int op = 0; op < 200000; ++op) {
    const std::int64_t key = key_of(rng);
    switch (rng() % 3) {
      case 0: {
        const auto [slot, inserted] = store.insert(key);
        BOOST_REQUIRE_EQUAL(inserted, reference.count(key) == 0);
        if (inserted) {
          for (std::size_t j = 0; j < kFloats; ++j) BOOST_REQUIRE_EQUAL(store.values(slot)[j], 0.0f);
          BOOST_REQUIRE_EQUAL(store.steps(slot), 0);
          write_row(store, slot, key);
          reference[key] = true;
        }
        BOOST_REQUIRE(row_is(store, slot, key));
        break;
      }
      case 1: {
        const auto slot = store.find(key);
        BOOST_REQUIRE_EQUAL(slot != RowStore::kNone, reference.count(key) == 1);
        if (slot != RowStore::kNone) BOOST_REQUIRE(row_is(store, slot, key));
        break;
      }
      default:
        BOOST_REQUIRE_EQUAL(store.erase(key), reference.erase(key) == 1);
    }
    BOOST_REQUIRE_EQUAL(store.size(), reference.size());
  }
  std::size_t seen = 0;
  store.for_each([&](std::int64_t key, RowStore::Slot slot) {
    ++seen;
    BOOST_REQUIRE_EQUAL(reference.count(key), 1u);
    BOOST_REQUIRE(row_is(store, slot, key));
  });
  BOOST_TEST(seen == reference.size());
}

BOOST_AUTO_TEST_CASE(rows_keep_their_address_while_the_index_grows_and_freed_slots_are_reused) {
  RowStore store;
  store.reset(kFloats);
  const auto first = store.insert(42).first;
  write_row(store, first, 42);
  const float* where = store.values(first);
  for (std::int64_t k = 0; k < 300000; ++k)
    if (k != 42) write_row(store, store.insert(k).first, k);
  BOOST_TEST(store.values(store.find(42)) == where);
  // Rows in blocks of every size (16 KiB doubling to 2 MiB, then 2 MiB each) overlap nowhere.
  for (std::int64_t k = 0; k < 300000; ++k) BOOST_REQUIRE(row_is(store, store.find(k), k));
  BOOST_TEST(store.erase(7));
  BOOST_TEST(!store.erase(7));
  const auto slot_of_7 = store.insert(300001).first;   // the slot key 7 left
  BOOST_TEST(store.find(7) == RowStore::kNone);
  BOOST_TEST(store.steps(slot_of_7) == 0);
  BOOST_TEST(store.size() == 300000u);
  store.reset(kFloats);
  BOOST_TEST(store.size() == 0u);
  BOOST_TEST(store.find(42) == RowStore::kNone);
}

BOOST_AUTO_TEST_CASE(every_key_is_found_in_a_crowded_index_after_each_erase) {
  // 13 keys in 32 buckets (multiples of 2^60 and small ones): runs of neighbours form, and each
  // erase must leave every other key reachable from its home bucket.
  RowStore store;
  store.reset(kFloats);
  std::vector<std::int64_t> keys;
  for (std::int64_t i = 0; i < 8; ++i) keys.push_back(i << 60);
  for (std::int64_t i = 1; i < 6; ++i) keys.push_back(i);
  for (auto k : keys) write_row(store, store.insert(k).first, k);
  for (std::size_t drop = 0; drop < keys.size(); drop += 2) {
    BOOST_REQUIRE(store.erase(keys[drop]));
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const bool gone = i <= drop && i % 2 == 0;
      const auto slot = store.find(keys[i]);
      BOOST_REQUIRE_EQUAL(slot == RowStore::kNone, gone);
      if (!gone) BOOST_REQUIRE(row_is(store, slot, keys[i]));
    }
  }
}
