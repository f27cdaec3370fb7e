// Anonymous memory for weights held by the process.
#pragma once

#include <cstddef>

namespace drama {

// Maps `bytes` of private anonymous read-write memory and asks for transparent huge pages (a
// hint; refused or ignored is fine): how the engine holds weights read into memory, and how the
// benchmarks hold theirs to measure the same thing. Returns nullptr with errno set on failure;
// release with munmap(p, bytes).
void* map_huge_anonymous(size_t bytes);

}  // namespace drama
