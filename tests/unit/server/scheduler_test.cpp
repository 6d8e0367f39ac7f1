// The batching scheduler with scripted hooks: what it tells the batch while a request waits.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "mlxrt/server/scheduler.h"

namespace mlxrt::server {
namespace {

using namespace std::chrono_literals;

/** A batch whose jobs never finish by themselves; `serve` runs until `arrived()` or its budget. */
struct ScriptedBatch {
  std::mutex mutex;
  std::condition_variable cv;
  size_t jobs = 0;
  bool serving = false;
  bool saw_arrival = false;
  std::atomic<bool> stop{false};  // ends a serve call so that shutdown() can join

  BatchHooks hooks() {
    BatchHooks h;
    h.run_single = [](Job& job) { job.push(DoneEvent{}); };
    h.batchable = [](const Job&) { return true; };
    h.open = [](const Job&) {};
    h.close = [] {};
    h.insert = [this](const std::shared_ptr<Job>& job) {
      job->push(StartedEvent{1, 0});
      std::lock_guard lock(mutex);
      ++jobs;
      cv.notify_all();
    };
    h.jobs = [this] {
      std::lock_guard lock(mutex);
      return jobs;
    };
    h.serve = [this](const std::function<bool()>& arrived) {
      {
        std::lock_guard lock(mutex);
        serving = true;
        cv.notify_all();
      }
      const auto start = std::chrono::steady_clock::now();
      // A budget far longer than the test waits: only arrived() ends it in time.
      while (!stop && std::chrono::steady_clock::now() - start < 30s) {
        std::this_thread::sleep_for(1ms);
        if (arrived()) {
          std::lock_guard lock(mutex);
          saw_arrival = true;
          break;
        }
      }
      std::lock_guard lock(mutex);
      serving = false;
    };
    h.fail = [this](int, const std::string&) {
      std::lock_guard lock(mutex);
      jobs = 0;
    };
    h.joinable = [](const Job&) { return true; };
    return h;
  }
};

std::shared_ptr<Job> task_job() {
  return std::make_shared<Job>([](Job&) {}, std::nullopt);
}

TEST(BatchingScheduler, ARequestArrivingMidBudgetJoinsWithoutWaitingItOut) {
  ScriptedBatch batch;
  BatchingScheduler scheduler(batch.hooks(), 16);
  scheduler.submit(task_job());
  {
    std::unique_lock lock(batch.mutex);
    ASSERT_TRUE(batch.cv.wait_for(lock, 10s, [&] { return batch.jobs == 1 && batch.serving; }));
  }
  const auto submitted = std::chrono::steady_clock::now();
  scheduler.submit(task_job());
  {
    std::unique_lock lock(batch.mutex);
    ASSERT_TRUE(batch.cv.wait_for(lock, 10s, [&] { return batch.jobs == 2; }))
        << "the second job was not inserted while the first one's budget ran";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - submitted, 10s);
  {
    std::lock_guard lock(batch.mutex);
    EXPECT_TRUE(batch.saw_arrival);
  }
  batch.stop = true;
  scheduler.shutdown();
}

TEST(BatchingScheduler, AQuietQueueLetsTheBudgetRun) {
  ScriptedBatch batch;
  BatchHooks hooks = batch.hooks();
  std::atomic<int> arrivals_seen{0};
  // A budget of 50 ms: with nothing queued, arrived() stays false the whole time.
  hooks.serve = [&](const std::function<bool()>& arrived) {
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < 50ms) {
      if (arrived()) ++arrivals_seen;
      std::this_thread::sleep_for(1ms);
    }
    std::lock_guard lock(batch.mutex);
    batch.serving = true;
    batch.cv.notify_all();
  };
  BatchingScheduler scheduler(hooks, 16);
  scheduler.submit(task_job());
  {
    std::unique_lock lock(batch.mutex);
    ASSERT_TRUE(batch.cv.wait_for(lock, 10s, [&] { return batch.serving; }));
  }
  scheduler.shutdown();
  EXPECT_EQ(arrivals_seen.load(), 0);
}

}  // namespace
}  // namespace mlxrt::server
