// Work that must not outlive the process. NCCL's teardown (ncclCommAbort)
// frees device memory from threads of its own; if it is still running when
// the process exits, after the CUDA runtime inside NCCL has been torn down,
// the process crashes. Such work runs on a thread that the process joins
// when it exits (std::atexit), whoever asked for it: the caller may be a
// thread the interpreter stops at shutdown without waiting for it.
// Plain C++ (no CUDA): tests/cuda_sim/exit_joined_sim.cc tests it alone.
#ifndef PLUGGABLE_CUDA_EXIT_JOINED_H_
#define PLUGGABLE_CUDA_EXIT_JOINED_H_

#include <cstddef>
#include <functional>
#include <future>

namespace pgcuda {

// Runs `work` (which must not throw) on a thread of its own, joined when
// the process exits. The
// future is ready once `work` has returned. When no thread can be started,
// `work` runs on the calling thread before the return and the future is not
// valid. Threads whose work has ended are joined when the next one starts.
std::shared_future<void> run_joined_at_exit(std::function<void()> work);

// Joins every thread started by run_joined_at_exit (what the exit handler
// does); work started meanwhile is joined by the exit handler.
void join_exit_joined();

// Threads started by run_joined_at_exit and not joined yet.
size_t exit_joined_pending();

}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_EXIT_JOINED_H_
