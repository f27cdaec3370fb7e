#include "engine/decode_passes.h"

#include <string>

namespace drama {

DecodePasses::DecodePasses(const MimiModel& codec, std::mutex& codec_mutex)
    : codec_(codec), codec_mutex_(codec_mutex), batch_(codec) {}

void DecodePasses::decode(MimiDecoderStream& stream, std::span<const int32_t> codes,
                          std::vector<float>& pcm) {
  check_mimi_codes(codec_, codes, 1, static_cast<int64_t>(codes.size()),
                   "Mimi decoder frame " + std::to_string(stream.frames()));
  Job job{&stream, codes, &pcm, false, nullptr};
  std::unique_lock lock(mutex_);
  queue_.push_back(&job);
  while (!job.done) {
    if (running_) {
      done_.wait(lock);
      continue;
    }
    running_ = true;
    // The oldest frame and every later one of its codebook count, up to kMaxPass.
    std::vector<Job*> pass, rest;
    const size_t k = queue_.front()->codes.size();
    for (Job* j : queue_)
      (pass.size() < kMaxPass && j->codes.size() == k ? pass : rest).push_back(j);
    queue_.swap(rest);
    const size_t count = pass.size();
    lock.unlock();
    run(pass);
    lock.lock();
    running_ = false;
    ++passes_;
    frames_ += static_cast<int64_t>(count);
    for (Job* j : pass) j->done = true;
    done_.notify_all();
  }
  if (job.error) std::rethrow_exception(job.error);
}

void DecodePasses::run(std::span<Job* const> pass) {
  try {
    std::vector<MimiDecoderStream*> streams;
    std::vector<std::span<const int32_t>> codes;
    std::vector<std::vector<float>*> pcm;
    for (Job* j : pass) {
      streams.push_back(j->stream);
      codes.push_back(j->codes);
      pcm.push_back(j->pcm);
    }
    std::lock_guard codec(codec_mutex_);
    batch_.decode(streams, codes, pcm);
  } catch (...) {
    for (Job* j : pass) j->error = std::current_exception();
  }
}

int64_t DecodePasses::passes() const {
  std::lock_guard lock(mutex_);
  return passes_;
}

int64_t DecodePasses::frames() const {
  std::lock_guard lock(mutex_);
  return frames_;
}

}  // namespace drama
