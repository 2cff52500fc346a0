#include "tests/orchestrator/storage/storage_conformance.hpp"

#include <algorithm>
#include <set>

namespace fg::storage::testing {

void StorageConformance::SetUp() {
  open_ = GetParam().fresh();
  if (!open_) {
    GTEST_SKIP() << GetParam().name << " is not available here";
  }
  db_ = open_();
  ASSERT_TRUE(db_);
}

namespace {

FileRecord upload(const std::string& id, const std::string& owner, UnixMs at) {
  FileRecord file;
  file.id = id;
  file.owner = owner;
  file.filename = id + ".jsonl";
  file.purpose = "batch";
  file.created_at = at;
  return file;
}

BatchRecord batch(const std::string& id, const std::string& owner, UnixMs at) {
  BatchRecord record;
  record.id = id;
  record.owner = owner;
  record.input_file_id = "file-in";
  record.endpoint = "/v1/chat/completions";
  record.completion_window = "24h";
  record.metadata_json = R"({"k":"v"})";
  record.created_at = at;
  record.expires_at = at + 86'400'000;
  return record;
}

std::vector<LineInput> lines(int n) {
  std::vector<LineInput> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(
        {i, "req-" + std::to_string(i), "m", R"({"model":"m","n":)" + std::to_string(i) + "}"});
  }
  return out;
}

Result ok_result(std::int64_t line_no, const std::string& text = "out") {
  return {line_no, true, R"({"custom_id":")" + text + R"("})"};
}

}  // namespace

TEST_P(StorageConformance, UploadIsInvisibleUntilFinishedAndReadsBackInChunks) {
  db_->create_file(upload("file-a", "alice", 1000));
  EXPECT_FALSE(db_->get_file("alice", "file-a"));
  EXPECT_TRUE(db_->list_files("alice", "", "", 10).empty());
  std::string big(70'000, 'x');
  big[0] = '\0';  // bodies are bytes, not C strings
  db_->append_chunk("file-a", 0, "hello ");
  db_->append_chunk("file-a", 1, big);
  db_->append_chunk("file-a", 2, "end");
  ASSERT_TRUE(db_->finish_upload("file-a", 6 + 70'000 + 3));
  auto file = db_->get_file("alice", "file-a");
  ASSERT_TRUE(file);
  EXPECT_EQ(file->state, FileState::ready);
  EXPECT_EQ(file->bytes, 70'009);
  EXPECT_EQ(file->filename, "file-a.jsonl");
  EXPECT_EQ(file->purpose, "batch");
  EXPECT_EQ(file->kind, FileKind::upload);
  EXPECT_EQ(file->created_at, 1000);

  auto first = db_->read_chunks("file-a", -1, 2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].data, "hello ");
  EXPECT_EQ(first[1].data, big);
  auto rest = db_->read_chunks("file-a", first.back().seq, 2);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].data, "end");
  EXPECT_TRUE(db_->read_chunks("file-a", rest[0].seq, 2).empty());
}

TEST_P(StorageConformance, FilesBelongToTheirOwner) {
  db_->create_file(upload("file-a", "alice", 1000));
  ASSERT_TRUE(db_->finish_upload("file-a", 0));
  EXPECT_FALSE(db_->get_file("bob", "file-a"));
  EXPECT_TRUE(db_->get_file("", "file-a"));  // the runner reads anybody's
  EXPECT_TRUE(db_->list_files("bob", "", "", 10).empty());
  EXPECT_FALSE(db_->delete_file("bob", "file-a"));
  EXPECT_TRUE(db_->get_file("alice", "file-a"));
  EXPECT_TRUE(db_->delete_file("alice", "file-a"));
  EXPECT_FALSE(db_->get_file("alice", "file-a"));
  EXPECT_FALSE(db_->delete_file("alice", "file-a"));
  EXPECT_TRUE(db_->read_chunks("file-a", -1, 10).empty());
}

TEST_P(StorageConformance, DeletingAnUnfinishedUploadRemovesItsChunks) {
  db_->create_file(upload("file-a", "alice", 1000));
  db_->append_chunk("file-a", 0, "partial");
  EXPECT_TRUE(db_->delete_file("alice", "file-a"));
  EXPECT_TRUE(db_->read_chunks("file-a", -1, 10).empty());
  EXPECT_FALSE(db_->finish_upload("file-a", 7));
}

TEST_P(StorageConformance, ListFilesPagesNewestFirstAndFiltersByPurpose) {
  for (int i = 0; i < 5; ++i) {
    auto file = upload("file-" + std::to_string(i), "alice", 1000 + i);
    if (i == 2) {
      file.purpose = "batch_output";
      file.kind = FileKind::batch_output;
      file.batch_id = "batch_x";
    }
    db_->create_file(file);
    ASSERT_TRUE(db_->finish_upload(file.id, i));
  }
  auto page = db_->list_files("alice", "", "", 2);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, "file-4");
  EXPECT_EQ(page[1].id, "file-3");
  page = db_->list_files("alice", "", "file-3", 10);
  ASSERT_EQ(page.size(), 3u);
  EXPECT_EQ(page[0].id, "file-2");
  EXPECT_EQ(page[0].kind, FileKind::batch_output);
  EXPECT_EQ(page[0].batch_id, "batch_x");
  EXPECT_EQ(page[2].id, "file-0");
  page = db_->list_files("alice", "batch", "", 10);
  EXPECT_EQ(page.size(), 4u);
  EXPECT_TRUE(std::none_of(page.begin(), page.end(), [](auto& f) { return f.id == "file-2"; }));
}

TEST_P(StorageConformance, BatchRoundTripsEveryField) {
  auto record = batch("batch_a", "alice", 5000);
  db_->create_batch(record);
  auto got = db_->get_batch("alice", "batch_a");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->owner, "alice");
  EXPECT_EQ(got->input_file_id, "file-in");
  EXPECT_EQ(got->endpoint, "/v1/chat/completions");
  EXPECT_EQ(got->completion_window, "24h");
  EXPECT_EQ(got->metadata_json, R"({"k":"v"})");
  EXPECT_EQ(got->status, BatchStatus::validating);
  EXPECT_EQ(got->errors_json, "null");
  EXPECT_EQ(got->created_at, 5000);
  EXPECT_EQ(got->expires_at, 5000 + 86'400'000);
  EXPECT_EQ(got->in_progress_at, 0);
  EXPECT_TRUE(got->output_file_id.empty());
  EXPECT_FALSE(db_->get_batch("bob", "batch_a"));
  EXPECT_TRUE(db_->get_batch("", "batch_a"));
  EXPECT_FALSE(db_->get_batch("alice", "batch_nope"));

  db_->set_errors("batch_a", R"({"object":"list","data":[]})");
  db_->set_result_files("batch_a", "file-out", "file-err");
  got = db_->get_batch("alice", "batch_a");
  EXPECT_EQ(got->errors_json, R"({"object":"list","data":[]})");
  EXPECT_EQ(got->output_file_id, "file-out");
  EXPECT_EQ(got->error_file_id, "file-err");
}

TEST_P(StorageConformance, TransitionsAreCompareAndSetAndStampTheirTime) {
  db_->create_batch(batch("batch_a", "alice", 5000));
  EXPECT_FALSE(db_->transition("batch_a", BatchStatus::in_progress, BatchStatus::finalizing, 6000));
  EXPECT_TRUE(db_->transition("batch_a", BatchStatus::validating, BatchStatus::in_progress, 6000));
  EXPECT_FALSE(db_->transition("batch_a", BatchStatus::validating, BatchStatus::failed, 6001));
  EXPECT_TRUE(db_->transition("batch_a", BatchStatus::in_progress, BatchStatus::cancelling, 7000));
  // The runner's finalize loses against the client's cancel.
  EXPECT_FALSE(db_->transition("batch_a", BatchStatus::in_progress, BatchStatus::finalizing, 7001));
  EXPECT_TRUE(db_->transition("batch_a", BatchStatus::cancelling, BatchStatus::cancelled, 8000));
  auto got = db_->get_batch("alice", "batch_a");
  EXPECT_EQ(got->status, BatchStatus::cancelled);
  EXPECT_EQ(got->in_progress_at, 6000);
  EXPECT_EQ(got->cancelling_at, 7000);
  EXPECT_EQ(got->cancelled_at, 8000);
  EXPECT_EQ(got->finalizing_at, 0);
  EXPECT_EQ(got->failed_at, 0);
  EXPECT_FALSE(db_->transition("batch_nope", BatchStatus::validating, BatchStatus::failed, 1));

  db_->create_batch(batch("batch_b", "alice", 5001));
  ASSERT_TRUE(db_->transition("batch_b", BatchStatus::validating, BatchStatus::in_progress, 1));
  ASSERT_TRUE(db_->transition("batch_b", BatchStatus::in_progress, BatchStatus::finalizing, 2));
  ASSERT_TRUE(db_->transition("batch_b", BatchStatus::finalizing, BatchStatus::completed, 3));
  got = db_->get_batch("alice", "batch_b");
  EXPECT_EQ(got->finalizing_at, 2);
  EXPECT_EQ(got->completed_at, 3);
  db_->create_batch(batch("batch_c", "alice", 5002));
  ASSERT_TRUE(db_->transition("batch_c", BatchStatus::validating, BatchStatus::in_progress, 1));
  ASSERT_TRUE(db_->transition("batch_c", BatchStatus::in_progress, BatchStatus::expired, 9));
  EXPECT_EQ(db_->get_batch("alice", "batch_c")->expired_at, 9);
  db_->create_batch(batch("batch_d", "alice", 5003));
  ASSERT_TRUE(db_->transition("batch_d", BatchStatus::validating, BatchStatus::failed, 4));
  EXPECT_EQ(db_->get_batch("alice", "batch_d")->failed_at, 4);
}

TEST_P(StorageConformance, ListsBatchesNewestFirstPerOwnerAndActiveOnesOldestFirst) {
  for (int i = 0; i < 5; ++i) {
    db_->create_batch(batch("batch_" + std::to_string(i), i == 1 ? "bob" : "alice", 100 + i));
  }
  ASSERT_TRUE(db_->transition("batch_3", BatchStatus::validating, BatchStatus::failed, 200));
  auto page = db_->list_batches("alice", "", 2);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, "batch_4");
  EXPECT_EQ(page[1].id, "batch_3");
  page = db_->list_batches("alice", "batch_3", 10);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, "batch_2");
  EXPECT_EQ(page[1].id, "batch_0");
  EXPECT_TRUE(db_->list_batches("alice", "batch_0", 10).empty());
  EXPECT_EQ(db_->list_batches("bob", "", 10).size(), 1u);

  auto active = db_->active_batches();
  std::vector<std::string> ids;
  for (auto& b : active) {
    ids.push_back(b.id);
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"batch_0", "batch_1", "batch_2", "batch_4"}));
  auto counts = db_->count_batches_by_status();
  ASSERT_EQ(counts.size(), static_cast<size_t>(kBatchStatusCount));
  EXPECT_EQ(counts[static_cast<int>(BatchStatus::validating)], 4);
  EXPECT_EQ(counts[static_cast<int>(BatchStatus::failed)], 1);
  EXPECT_EQ(counts[static_cast<int>(BatchStatus::completed)], 0);
}

TEST_P(StorageConformance, ClaimsLeaseLinesInOrderAndCountAttempts) {
  db_->create_batch(batch("batch_a", "alice", 1));
  db_->add_lines("batch_a", lines(3));
  db_->add_lines("batch_a", {{3, "req-3", "m2", "{}"}});
  db_->add_lines("batch_a", {{3, "req-3", "m3", "{}"}});  // again: kept as it was
  auto counts = db_->count_lines("batch_a", 100);
  EXPECT_EQ(counts.pending, 4);
  EXPECT_EQ(counts.total(), 4);

  auto claimed = db_->claim_lines("batch_a", "gw1", 100, 1100, 2);
  ASSERT_EQ(claimed.size(), 2u);
  EXPECT_EQ(claimed[0].line_no, 0);
  EXPECT_EQ(claimed[0].custom_id, "req-0");
  EXPECT_EQ(claimed[0].model, "m");
  EXPECT_EQ(claimed[0].body, R"({"model":"m","n":0})");
  EXPECT_EQ(claimed[0].attempts, 1);
  EXPECT_EQ(claimed[0].lease_owner, "gw1");
  EXPECT_EQ(claimed[0].lease_expires_at, 1100);
  EXPECT_EQ(claimed[1].line_no, 1);
  counts = db_->count_lines("batch_a", 100);
  EXPECT_EQ(counts.pending, 2);
  EXPECT_EQ(counts.leased, 2);

  auto more = db_->claim_lines("batch_a", "gw1", 100, 1100, 10);
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(more[0].line_no, 2);
  EXPECT_EQ(more[1].line_no, 3);
  EXPECT_EQ(more[1].model, "m2");
  EXPECT_TRUE(db_->claim_lines("batch_a", "gw1", 100, 1100, 10).empty());
  EXPECT_TRUE(db_->claim_lines("batch_other", "gw1", 100, 1100, 10).empty());
}

TEST_P(StorageConformance, ReleasedLinesWaitForTheirBackOff) {
  db_->create_batch(batch("batch_a", "alice", 1));
  db_->add_lines("batch_a", lines(1));
  ASSERT_EQ(db_->claim_lines("batch_a", "gw1", 100, 1100, 10).size(), 1u);
  EXPECT_FALSE(db_->release_line("batch_a", 0, "gw2", 500));
  EXPECT_TRUE(db_->release_line("batch_a", 0, "gw1", 500));
  EXPECT_EQ(db_->count_lines("batch_a", 200).pending, 1);
  EXPECT_TRUE(db_->claim_lines("batch_a", "gw1", 499, 1500, 10).empty());
  auto again = db_->claim_lines("batch_a", "gw1", 500, 1500, 10);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempts, 2);
  EXPECT_FALSE(db_->release_line("batch_a", 7, "gw1", 0));
}

TEST_P(StorageConformance, ExpiredLeasesOfACrashedGatewayGoToAnother) {
  db_->create_batch(batch("batch_a", "alice", 1));
  db_->add_lines("batch_a", lines(2));
  auto other = open_again();
  ASSERT_TRUE(other);
  ASSERT_EQ(db_->claim_lines("batch_a", "gw1", 100, 1100, 10).size(), 2u);
  EXPECT_TRUE(other->claim_lines("batch_a", "gw2", 1099, 2100, 10).empty());
  EXPECT_TRUE(db_->renew_lease("batch_a", 1, "gw1", 3000));
  EXPECT_FALSE(other->renew_lease("batch_a", 0, "gw2", 3000));
  auto counts = other->count_lines("batch_a", 1100);
  EXPECT_EQ(counts.pending, 1);  // line 0's lease expired at 1100
  EXPECT_EQ(counts.leased, 1);
  auto taken = other->claim_lines("batch_a", "gw2", 1100, 2100, 10);
  ASSERT_EQ(taken.size(), 1u);  // line 1 was renewed until 3000
  EXPECT_EQ(taken[0].line_no, 0);
  EXPECT_EQ(taken[0].attempts, 2);
  EXPECT_EQ(taken[0].lease_owner, "gw2");
  EXPECT_FALSE(db_->renew_lease("batch_a", 0, "gw1", 5000));
  EXPECT_FALSE(db_->release_line("batch_a", 0, "gw1", 0));
}

TEST_P(StorageConformance, AbandonedUploadsAreDeletedWithTheirChunks) {
  // An upload whose gateway died midway stays `uploading` forever unless swept.
  db_->create_file(upload("file-old", "alice", 100));
  db_->append_chunk("file-old", 0, "abc");
  db_->create_file(upload("file-new", "alice", 300));
  db_->append_chunk("file-new", 0, "def");
  db_->create_file(upload("file-done", "alice", 100));
  db_->append_chunk("file-done", 0, "ghi");
  ASSERT_TRUE(db_->finish_upload("file-done", 3));

  EXPECT_EQ(db_->delete_abandoned_uploads(200), 1);
  EXPECT_TRUE(db_->read_chunks("file-old", -1, 10).empty());
  EXPECT_FALSE(db_->delete_file("alice", "file-old"));
  // Younger uploads and finished files stay.
  ASSERT_EQ(db_->read_chunks("file-new", -1, 10).size(), 1u);
  EXPECT_TRUE(db_->finish_upload("file-new", 3));
  ASSERT_TRUE(db_->get_file("alice", "file-done"));
  EXPECT_EQ(db_->read_chunks("file-done", -1, 10).size(), 1u);
  EXPECT_EQ(db_->delete_abandoned_uploads(1000), 0);
}

TEST_P(StorageConformance, ReleaseAllLeasesReturnsThemAtOnce) {
  db_->create_batch(batch("batch_a", "alice", 1));
  db_->add_lines("batch_a", lines(3));
  ASSERT_EQ(db_->claim_lines("batch_a", "gw1", 100, 100'000, 2).size(), 2u);
  ASSERT_EQ(db_->record_result("batch_a", ok_result(0), 150), RecordOutcome::recorded);
  EXPECT_EQ(db_->release_all_leases(), 1);
  auto taken = db_->claim_lines("batch_a", "gw2", 200, 300, 10);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].line_no, 1);
  EXPECT_EQ(taken[1].line_no, 2);
}

TEST_P(StorageConformance, ResultsAreRecordedExactlyOncePerLine) {
  db_->create_batch(batch("batch_a", "alice", 1));
  db_->add_lines("batch_a", lines(3));
  auto other = open_again();
  ASSERT_EQ(db_->claim_lines("batch_a", "gw1", 100, 200, 10).size(), 3u);
  // gw1 stalls past its lease, gw2 runs line 0 again and both answer: the first result wins.
  ASSERT_EQ(other->claim_lines("batch_a", "gw2", 300, 400, 1).size(), 1u);
  EXPECT_EQ(other->record_result("batch_a", ok_result(0, "second"), 310), RecordOutcome::recorded);
  EXPECT_EQ(db_->record_result("batch_a", ok_result(0, "first"), 320),
            RecordOutcome::already_recorded);
  EXPECT_EQ(db_->record_result("batch_a", {0, false, R"({"e":1})"}, 330),
            RecordOutcome::already_recorded);
  EXPECT_EQ(db_->record_result("batch_a", {1, false, R"({"e":1})"}, 330), RecordOutcome::recorded);
  EXPECT_EQ(db_->record_result("batch_a", ok_result(9), 330), RecordOutcome::no_such_line);
  EXPECT_EQ(db_->record_result("batch_x", ok_result(0), 330), RecordOutcome::no_such_line);

  auto counts = db_->count_lines("batch_a", 330);
  EXPECT_EQ(counts.succeeded, 1);
  EXPECT_EQ(counts.failed, 1);
  EXPECT_EQ(counts.pending, 1);  // line 2: gw1's lease expired
  EXPECT_EQ(counts.total(), 3);
  // A line with a result is never claimed again, whatever its lease said.
  auto rest = other->claim_lines("batch_a", "gw2", 1000, 2000, 10);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].line_no, 2);
  EXPECT_FALSE(db_->release_line("batch_a", 0, "gw2", 0));

  auto outputs = db_->read_results("batch_a", true, -1, 10);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].line_no, 0);
  EXPECT_EQ(outputs[0].line_json, R"({"custom_id":"second"})");
  auto errors = db_->read_results("batch_a", false, -1, 10);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].line_no, 1);
  EXPECT_FALSE(errors[0].ok);
}

TEST_P(StorageConformance, ReadsResultsAndUnfinishedLinesInPages) {
  db_->create_batch(batch("batch_a", "alice", 1));
  db_->add_lines("batch_a", lines(10));
  for (int i = 9; i >= 0; i -= 2) {  // recorded out of order
    ASSERT_EQ(db_->record_result("batch_a", ok_result(i, std::to_string(i)), 5),
              RecordOutcome::recorded);
  }
  ASSERT_EQ(db_->claim_lines("batch_a", "gw1", 10, 20, 1).size(), 1u);  // line 0 leased
  std::vector<std::int64_t> seen;
  std::int64_t after = -1;
  for (;;) {
    auto page = db_->read_results("batch_a", true, after, 2);
    if (page.empty()) {
      break;
    }
    for (auto& r : page) {
      seen.push_back(r.line_no);
    }
    after = page.back().line_no;
  }
  EXPECT_EQ(seen, (std::vector<std::int64_t>{1, 3, 5, 7, 9}));
  auto unfinished = db_->unfinished_lines("batch_a", -1, 3);
  ASSERT_EQ(unfinished.size(), 3u);
  EXPECT_EQ(unfinished[0].line_no, 0);
  EXPECT_EQ(unfinished[0].custom_id, "req-0");
  EXPECT_EQ(unfinished[2].line_no, 4);
  unfinished = db_->unfinished_lines("batch_a", 4, 10);
  ASSERT_EQ(unfinished.size(), 2u);
  EXPECT_EQ(unfinished[1].line_no, 8);
}

TEST_P(StorageConformance, CountsLinesByStateOverActiveBatches) {
  db_->create_batch(batch("batch_a", "alice", 1));
  db_->create_batch(batch("batch_b", "alice", 2));
  db_->add_lines("batch_a", lines(4));
  db_->add_lines("batch_b", lines(2));
  ASSERT_EQ(db_->claim_lines("batch_a", "gw1", 10, 100, 2).size(), 2u);
  ASSERT_EQ(db_->record_result("batch_a", ok_result(0), 11), RecordOutcome::recorded);
  ASSERT_EQ(db_->record_result("batch_b", {0, false, "{}"}, 11), RecordOutcome::recorded);
  auto by_state = db_->count_lines_by_state(50);
  ASSERT_EQ(by_state.size(), 4u);
  EXPECT_EQ(by_state[static_cast<int>(LineState::pending)], 3);
  EXPECT_EQ(by_state[static_cast<int>(LineState::leased)], 1);
  EXPECT_EQ(by_state[static_cast<int>(LineState::succeeded)], 1);
  EXPECT_EQ(by_state[static_cast<int>(LineState::failed)], 1);
  ASSERT_TRUE(db_->transition("batch_b", BatchStatus::validating, BatchStatus::failed, 60));
  by_state = db_->count_lines_by_state(200);  // batch_b is terminal; gw1's lease expired
  EXPECT_EQ(by_state[static_cast<int>(LineState::pending)], 3);
  EXPECT_EQ(by_state[static_cast<int>(LineState::leased)], 0);
  EXPECT_EQ(by_state[static_cast<int>(LineState::failed)], 0);
}

TEST_P(StorageConformance, DataSurvivesReopening) {
  db_->create_file(upload("file-a", "alice", 1));
  db_->append_chunk("file-a", 0, "abc");
  ASSERT_TRUE(db_->finish_upload("file-a", 3));
  db_->create_batch(batch("batch_a", "alice", 1));
  db_->add_lines("batch_a", lines(2));
  ASSERT_EQ(db_->record_result("batch_a", ok_result(1), 5), RecordOutcome::recorded);
  db_.reset();
  auto reopened = open_again();
  EXPECT_EQ(reopened->read_chunks("file-a", -1, 10).at(0).data, "abc");
  EXPECT_EQ(reopened->count_lines("batch_a", 10).succeeded, 1);
  EXPECT_EQ(reopened->record_result("batch_a", ok_result(1), 6), RecordOutcome::already_recorded);
}

}  // namespace fg::storage::testing

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(StorageConformance);
