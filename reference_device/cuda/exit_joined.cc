// Threads joined at exit (exit_joined.h).
#include "exit_joined.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace pgcuda {
namespace {

struct Joined {
  std::thread thread;
  std::shared_future<void> ended;
};

// Never destroyed: the exit handler may run after static destructors of
// other translation units.
std::mutex& g_mu = *new std::mutex();
std::vector<Joined>& g_threads = *new std::vector<Joined>();

// Joins the threads whose work has ended (g_mu held).
void join_ended_locked() {
  for (Joined& j : g_threads) {
    if (j.thread.joinable() &&
        j.ended.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      j.thread.join();
    }
  }
  g_threads.erase(std::remove_if(g_threads.begin(), g_threads.end(),
                                 [](const Joined& j) { return !j.thread.joinable(); }),
                  g_threads.end());
}

}  // namespace

void join_exit_joined() {
  std::vector<Joined> running;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    running.swap(g_threads);
  }
  for (Joined& j : running) {
    if (j.thread.joinable()) j.thread.join();
  }
}

size_t exit_joined_pending() {
  std::lock_guard<std::mutex> lock(g_mu);
  size_t n = 0;
  for (const Joined& j : g_threads) n += j.thread.joinable() ? 1 : 0;
  return n;
}

std::shared_future<void> run_joined_at_exit(std::function<void()> work) {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(join_exit_joined); });
  try {
    auto promise = std::make_shared<std::promise<void>>();
    std::shared_future<void> ended = promise->get_future().share();
    std::lock_guard<std::mutex> lock(g_mu);
    join_ended_locked();
    g_threads.reserve(g_threads.size() + 1);  // nothing throws once the thread runs
    g_threads.push_back(Joined{std::thread([work, promise] {
                                 work();
                                 promise->set_value();
                               }),
                               ended});
    return ended;
  } catch (const std::exception&) {  // no memory, or no thread
    work();
    return {};
  }
}

}  // namespace pgcuda
