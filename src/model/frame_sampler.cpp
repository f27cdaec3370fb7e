#include "model/frame_sampler.h"

#include <string>

#include "util/error.h"

namespace drama {

int32_t FrameSampler::draw(Backend& backend, const float* logits, int64_t vocab, int64_t frame,
                           int64_t codebook) const {
  if (backend.has_non_finite(logits, vocab))
    throw Error("frame " + std::to_string(frame) + ": the logits of codebook " +
                std::to_string(codebook) +
                " hold NaN or Inf (a corrupted weight?); generation stopped");
  return backend.sample(logits, vocab, params_, seed_, static_cast<uint64_t>(frame),
                        static_cast<uint64_t>(codebook));
}

}  // namespace drama
