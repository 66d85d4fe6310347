// The retry policy of remote requests, as pure functions so it is tested
// without a network: which failures are worth another try, and how long to
// wait before it (exponential backoff with "equal jitter": half the capped
// exponential delay fixed, half uniform, so ranks that failed together do
// not retry together).
//
// Thread-safety: pure functions.
#ifndef SATURATE_REMOTE_RETRY_H_
#define SATURATE_REMOTE_RETRY_H_

#include <cstdint>

#include "saturate/remote/object_store.h"

namespace saturate::remote {

// A transport failure, as far as the policy cares.
enum class Transport : uint8_t {
  kOk,         // a complete HTTP response arrived (look at the status)
  kTransient,  // connect refused, reset, timeout, partial body
  kPermanent,  // bad URL, TLS certificate, out of memory: retrying cannot help
};

// Whether a request that ended this way is tried again: transient transport
// failures, HTTP 5xx, 408 and 429. Never 2xx, 3xx or other 4xx.
bool ShouldRetry(Transport transport, long http_status);

// The wait before retry number `retry` (0 for the first retry):
// d = min(max_delay, base_delay * 2^retry); d / 2 + (random % (d / 2 + 1)).
uint64_t BackoffDelayNs(const RetryOptions& options, int retry, uint64_t random);

// Whether another try may start: attempts so far < max_attempts and the
// time since the first try (plus the next wait) within the deadline.
bool MayRetry(const RetryOptions& options, int attempts_done, uint64_t elapsed_ns,
              uint64_t next_delay_ns);

}  // namespace saturate::remote

#endif  // SATURATE_REMOTE_RETRY_H_
