#include "runtime/rank_threads.h"

#include <exception>
#include <thread>
#include <vector>

#include "core/error.h"

namespace orchid::runtime {

void run_on_rank_threads(size_t ranks, const std::function<void(size_t)>& fn,
                         const std::function<void(size_t)>& abort_group) {
  if (ranks == 1) return fn(0);
  std::vector<std::exception_ptr> errors(ranks);
  auto run = [&](size_t r) {
    try {
      fn(r);
    } catch (...) {
      errors[r] = std::current_exception();
      abort_group(r);
    }
  };
  std::vector<std::thread> threads;
  for (size_t r = 1; r < ranks; ++r) threads.emplace_back(run, r);
  run(0);
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const Error&) {
        throw;
      } catch (...) {
      }
    }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace orchid::runtime
